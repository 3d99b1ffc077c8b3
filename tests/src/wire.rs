//! Counts AWS requests at the wire: every HTTP request a client sends
//! (including retries), by service and operation (`X-Amz-Target`, which both
//! DynamoDB and SQS's JSON protocol set).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::error::BoxError;

#[derive(Clone, Debug, Default)]
pub struct RequestCounter {
    counts: Arc<Mutex<BTreeMap<String, usize>>>,
}

impl RequestCounter {
    /// Requests so far, by `Service.Operation`.
    pub fn snapshot(&self) -> BTreeMap<String, usize> {
        self.counts.lock().unwrap().clone()
    }

    pub fn reset(&self) {
        self.counts.lock().unwrap().clear();
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
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let target = context
            .request()
            .headers()
            .get("x-amz-target")
            .unwrap_or("unknown")
            .replace("DynamoDB_20120810", "DynamoDB")
            .replace("AmazonSQS", "SQS");
        *self.counts.lock().unwrap().entry(target).or_default() += 1;
        Ok(())
    }
}
