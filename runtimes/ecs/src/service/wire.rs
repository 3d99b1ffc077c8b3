//! Sending the user's request JSON through the SDK. A service's files are
//! ECS API requests as ECS takes them (what `aws ecs … --cli-input-json`
//! reads), so every field ECS knows works without Vergence mapping each
//! one onto the SDK's builders: the operation is built with its required
//! members only, and [`RequestBody`] puts the full JSON in its place before
//! the request is signed. The SDK still signs, retries, sends and parses
//! the answer.

use std::sync::{Arc, Mutex, PoisonError};

use aws_sdk_ecs::config::interceptors::{
    AfterDeserializationInterceptorContextRef, BeforeTransmitInterceptorContextMut,
};
use aws_sdk_ecs::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_ecs::error::BoxError;
use aws_smithy_types::body::SdkBody;
use serde_json::{Map, Value};

/// Replaces the body of one operation's request with `0`.
#[derive(Debug)]
pub(super) struct RequestBody(String);

impl RequestBody {
    pub(super) fn of(request: Map<String, Value>) -> aws_sdk_ecs::config::Builder {
        aws_sdk_ecs::config::Builder::default()
            .interceptor(RequestBody(Value::Object(request).to_string()))
    }
}

impl Intercept for RequestBody {
    fn name(&self) -> &'static str {
        "vergence-ecs-request-body"
    }

    fn modify_before_signing(
        &self,
        context: &mut BeforeTransmitInterceptorContextMut<'_>,
        _components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let request = context.request_mut();
        *request.body_mut() = SdkBody::from(self.0.clone());
        request
            .headers_mut()
            .insert("content-length", self.0.len().to_string());
        Ok(())
    }
}

/// Keeps the JSON body of one operation's answer: the fields as ECS says
/// them, in the shape of the user's request files, so they compare field
/// by field without mapping each SDK type back.
#[derive(Debug, Clone, Default)]
pub(super) struct ResponseBody(Arc<Mutex<Option<Value>>>);

impl ResponseBody {
    pub(super) fn config(&self) -> aws_sdk_ecs::config::Builder {
        aws_sdk_ecs::config::Builder::default().interceptor(self.clone())
    }

    /// The answer's JSON; `Null` when there was none to read.
    pub(super) fn take(&self) -> Value {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .unwrap_or_default()
    }
}

impl Intercept for ResponseBody {
    fn name(&self) -> &'static str {
        "vergence-ecs-response-body"
    }

    fn read_after_deserialization(
        &self,
        context: &AfterDeserializationInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let body = context
            .response()
            .body()
            .bytes()
            .and_then(|b| serde_json::from_slice(b).ok());
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = body;
        Ok(())
    }
}
