//! A rule-based stand-in for the language model, for running the workers on one machine without Bedrock
//! (`make run`). It never finds a contradiction, always keeps both memories of a near-duplicate pair, merges by
//! joining the two texts, writes a profile that lists its sources, and declines to classify queries (retrieval
//! then uses its rule-based taxonomy). Never used unless a local tool chooses it.

use async_trait::async_trait;

use super::{InvocationPurpose, Llm, LlmError, LlmRequest, quoted_texts};

pub struct OfflineLlm;

#[async_trait]
impl Llm for OfflineLlm {
    async fn complete(&self, request: LlmRequest) -> Result<String, LlmError> {
        let items = |prefix: &str| request.prompt.lines().filter(|l| l.starts_with(prefix)).count();
        match request.purpose {
            InvocationPurpose::MemoryContradiction => {
                let relations: Vec<String> = (0..items("Existing "))
                    .map(|i| format!(r#"{{"memory": {i}, "relation": "independent"}}"#))
                    .collect();
                Ok(format!(r#"{{"relations": [{}]}}"#, relations.join(",")))
            }
            InvocationPurpose::MemoryDedup => {
                let decisions: Vec<String> =
                    (0..items("Pair ")).map(|i| format!(r#"{{"pair": {i}, "decision": "keep_both"}}"#)).collect();
                Ok(format!(r#"{{"decisions": [{}]}}"#, decisions.join(",")))
            }
            InvocationPurpose::MemoryMerge => Ok(quoted_texts(&request.prompt).join(" ")),
            InvocationPurpose::MemorySynthesis => {
                let entity = request.prompt.lines().next().unwrap_or_default();
                Ok(format!("{entity}: {}", quoted_texts(&request.prompt).join(" ")))
            }
            InvocationPurpose::MemoryRetrieval => Err(LlmError::Call("the offline stand-in does not classify".into())),
        }
    }
}
