//! A deterministic model for tests and local runs: answers come from functions registered per purpose.

use std::{collections::HashMap, sync::Mutex, time::Duration};

use async_trait::async_trait;

use super::{InvocationPurpose, Llm, LlmError, LlmRequest};

type Script = Box<dyn Fn(&LlmRequest) -> Result<String, LlmError> + Send + Sync>;

#[derive(Default)]
pub struct ScriptedLlm {
    scripts: HashMap<InvocationPurpose, Script>,
    delay: Option<Duration>,
    calls: Mutex<Vec<LlmRequest>>,
}

impl ScriptedLlm {
    pub fn new() -> Self {
        Self::default()
    }

    /// Answers requests of `purpose` with `script`.
    pub fn on(
        mut self,
        purpose: InvocationPurpose,
        script: impl Fn(&LlmRequest) -> Result<String, LlmError> + Send + Sync + 'static,
    ) -> Self {
        self.scripts.insert(purpose, Box::new(script));
        self
    }

    /// Waits this long before every answer (to exercise timeouts).
    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// Every request received so far.
    pub fn calls(&self) -> Vec<LlmRequest> {
        self.calls.lock().expect("calls lock").clone()
    }
}

#[async_trait]
impl Llm for ScriptedLlm {
    async fn complete(&self, request: LlmRequest) -> Result<String, LlmError> {
        self.calls.lock().expect("calls lock").push(request.clone());
        if let Some(delay) = self.delay {
            tokio::time::sleep(delay).await;
        }
        match self.scripts.get(&request.purpose) {
            Some(script) => script(&request),
            None => Err(LlmError::Call(format!("no script for {}", request.purpose.as_str()))),
        }
    }
}
