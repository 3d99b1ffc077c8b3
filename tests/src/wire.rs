//! Counts AWS requests at the wire: every HTTP request a client sends
//! (including retries), by service and operation (`X-Amz-Target`, which both
//! DynamoDB and SQS's JSON protocol set), and the capacity units DynamoDB
//! says each request consumed.
//!
//! Every DynamoDB request is sent with `ReturnConsumedCapacity: TOTAL` (the
//! counter adds it when the caller did not ask), and the `ConsumedCapacity`
//! of the answer is summed. DynamoDB Local answers with `CapacityUnits` as
//! AWS computes them from item sizes (1 KB per write unit, 4 KB per read
//! unit, half for an eventually consistent read, twice inside a
//! transaction), with two differences from AWS's bill, made up for here: a
//! read that finds nothing is answered with 0 units where AWS charges its
//! minimum (0.5, or 1 for a consistent read), and a write refused by its
//! condition is answered with an error and no units where AWS charges the
//! write (counted as one write unit).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::config::interceptors::{
    AfterDeserializationInterceptorContextRef, BeforeTransmitInterceptorContextMut,
    BeforeTransmitInterceptorContextRef,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::error::BoxError;
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::config_bag::{Storable, StoreReplace};

#[derive(Clone, Debug, Default)]
pub struct RequestCounter {
    counts: Arc<Mutex<BTreeMap<String, usize>>>,
    capacity: Arc<Mutex<Capacity>>,
    /// Time from sending a request to its answer read, by service.
    waited: Arc<Mutex<BTreeMap<&'static str, std::time::Duration>>>,
}

/// When a request left, and to which service.
#[derive(Clone, Copy, Debug)]
struct Sent {
    at: std::time::Instant,
    service: &'static str,
}

impl Storable for Sent {
    type Storer = StoreReplace<Self>;
}

/// DynamoDB capacity units consumed (on demand: request units).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Capacity {
    pub read: f64,
    pub write: f64,
}

impl RequestCounter {
    /// Requests so far, by `Service.Operation`.
    pub fn snapshot(&self) -> BTreeMap<String, usize> {
        self.counts.lock().unwrap().clone()
    }

    /// DynamoDB capacity units consumed so far.
    pub fn capacity(&self) -> Capacity {
        *self.capacity.lock().unwrap()
    }

    /// Time spent waiting for answers so far, by service (`DynamoDB`,
    /// `SQS`): where a step's time goes.
    pub fn waited(&self) -> BTreeMap<&'static str, std::time::Duration> {
        self.waited.lock().unwrap().clone()
    }

    pub fn reset(&self) {
        self.counts.lock().unwrap().clear();
        self.waited.lock().unwrap().clear();
        *self.capacity.lock().unwrap() = Capacity::default();
    }
}

/// What one DynamoDB request is billed as, decided from its request.
#[derive(Clone, Copy, Debug)]
struct Billed {
    read: bool,
    /// The least AWS charges for it.
    minimum: f64,
}

impl Storable for Billed {
    type Storer = StoreReplace<Self>;
}

fn operation(target: &str) -> Option<&str> {
    target.strip_prefix("DynamoDB_20120810.")
}

fn is_read(op: &str) -> bool {
    matches!(
        op,
        "GetItem" | "Query" | "Scan" | "BatchGetItem" | "TransactGetItems"
    )
}

/// The `CapacityUnits` of an answer's `ConsumedCapacity` (one object, or a
/// list of them for batches and transactions).
fn units(body: &[u8]) -> Option<f64> {
    let answer: serde_json::Value = serde_json::from_slice(body).ok()?;
    let one = |c: &serde_json::Value| c["CapacityUnits"].as_f64().unwrap_or(0.0);
    match &answer["ConsumedCapacity"] {
        serde_json::Value::Array(all) => Some(all.iter().map(one).sum()),
        serde_json::Value::Object(_) => Some(one(&answer["ConsumedCapacity"])),
        _ => None,
    }
}

impl Intercept for RequestCounter {
    fn name(&self) -> &'static str {
        "RequestCounter"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let target = context
            .request()
            .headers()
            .get("x-amz-target")
            .unwrap_or("unknown")
            .replace("DynamoDB_20120810", "DynamoDB")
            .replace("AmazonSQS", "SQS");
        let service = if target.starts_with("DynamoDB") {
            "DynamoDB"
        } else if target.starts_with("SQS") {
            "SQS"
        } else {
            "other"
        };
        cfg.interceptor_state().store_put(Sent {
            at: std::time::Instant::now(),
            service,
        });
        *self.counts.lock().unwrap().entry(target).or_default() += 1;
        Ok(())
    }

    /// Asks DynamoDB for the capacity each request consumes.
    fn modify_before_signing(
        &self,
        context: &mut BeforeTransmitInterceptorContextMut<'_>,
        _: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let request = context.request_mut();
        let Some(op) = request.headers().get("x-amz-target").and_then(operation) else {
            return Ok(());
        };
        let read = is_read(op);
        // A trace of every request in order, for finding where a count comes from.
        if std::env::var_os("VERGENCE_WIRE_TRACE").is_some()
            && let Some(bytes) = request.body().bytes()
        {
            let text = String::from_utf8_lossy(bytes);
            eprintln!("WIRE {op} {}", &text[..text.len().min(400)]);
        }
        let Some(mut body) = request
            .body()
            .bytes()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(b).ok())
        else {
            return Ok(());
        };
        let consistent = body["ConsistentRead"].as_bool().unwrap_or(false);
        let minimum = match (read, consistent) {
            (true, true) | (false, _) => 1.0,
            (true, false) => 0.5,
        };
        cfg.interceptor_state().store_put(Billed { read, minimum });
        if let Some(fields) = body.as_object_mut()
            && !fields.contains_key("ReturnConsumedCapacity")
        {
            fields.insert("ReturnConsumedCapacity".into(), "TOTAL".into());
            let bytes = serde_json::to_vec(&body)?;
            request
                .headers_mut()
                .insert("content-length", bytes.len().to_string());
            *request.body_mut() = SdkBody::from(bytes);
        }
        Ok(())
    }

    /// Sums the capacity the answer says was consumed.
    fn read_after_deserialization(
        &self,
        context: &AfterDeserializationInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some(sent) = cfg.load::<Sent>().copied() {
            *self.waited.lock().unwrap().entry(sent.service).or_default() += sent.at.elapsed();
        }
        let Some(billed) = cfg.load::<Billed>().copied() else {
            return Ok(());
        };
        let response = context.response();
        let consumed = response.body().bytes().and_then(units);
        let charged = match consumed {
            Some(units) if units > 0.0 => units,
            // A read that found nothing, or a write refused by its
            // condition (an error, without ConsumedCapacity): AWS still
            // charges the request's minimum. Other errors (throttling, a
            // fault) are not charged.
            _ if response.status().is_success()
                || response.body().bytes().is_some_and(|b| {
                    String::from_utf8_lossy(b).contains("ConditionalCheckFailed")
                }) =>
            {
                billed.minimum
            }
            _ => 0.0,
        };
        let mut capacity = self.capacity.lock().unwrap();
        if billed.read {
            capacity.read += charged;
        } else {
            capacity.write += charged;
        }
        Ok(())
    }
}
