//! Bedrock Converse adapter (a Haiku-class model by default).

use async_trait::async_trait;
use aws_sdk_bedrockruntime::{
    Client,
    error::DisplayErrorContext,
    types::{ContentBlock, ConversationRole, InferenceConfiguration, Message, StopReason, SystemContentBlock},
};

use super::{Llm, LlmError, LlmRequest};

pub struct BedrockLlm {
    client: Client,
    model_id: String,
}

impl BedrockLlm {
    pub fn new(client: Client, model_id: impl Into<String>) -> Self {
        Self { client, model_id: model_id.into() }
    }
}

#[async_trait]
impl Llm for BedrockLlm {
    async fn complete(&self, request: LlmRequest) -> Result<String, LlmError> {
        let message = Message::builder()
            .role(ConversationRole::User)
            .content(ContentBlock::Text(request.prompt))
            .build()
            .map_err(|e| LlmError::Call(e.to_string()))?;
        let output = self
            .client
            .converse()
            .model_id(&self.model_id)
            .system(SystemContentBlock::Text(request.system))
            .messages(message)
            .inference_config(InferenceConfiguration::builder().max_tokens(request.max_tokens).temperature(0.0).build())
            .request_metadata("invocation_purpose", request.purpose.as_str())
            .send()
            .await
            .map_err(|e| LlmError::Call(DisplayErrorContext(e).to_string()))?;
        // An answer cut off (at max_tokens, or by the context window) is not an answer: a truncated merge or profile
        // would be stored as whole.
        match output.stop_reason {
            StopReason::MaxTokens => {
                return Err(LlmError::Malformed(format!("the answer was cut off at {} tokens", request.max_tokens)));
            }
            StopReason::ModelContextWindowExceeded => {
                return Err(LlmError::Malformed("the answer was cut off by the model's context window".into()));
            }
            _ => {}
        }
        let message = output
            .output
            .and_then(|o| o.as_message().ok().cloned())
            .ok_or_else(|| LlmError::Malformed("Converse returned no message".into()))?;
        let text: String = message.content.iter().filter_map(|block| block.as_text().ok()).cloned().collect();
        if text.is_empty() { Err(LlmError::Malformed("Converse returned no text".into())) } else { Ok(text) }
    }
}
