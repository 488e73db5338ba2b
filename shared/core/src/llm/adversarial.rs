//! A stand-in for the language model that misbehaves where it matters, for the soak test (`MEMORY_LLM=adversarial`
//! for the local workers): it obeys instructions it finds in memory text (a memory saying it "contradicts" the
//! others makes it label them all contradictory), answers in prose every fifth call, names ids it was not given
//! every seventh, and otherwise answers as the offline stand-in does, merging the first pair of each review.
//! The guards are what keep memory sound with it, not its good behaviour.

use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;

use super::{InvocationPurpose, Llm, LlmError, LlmRequest, OfflineLlm, quoted_texts};

#[derive(Default)]
pub struct AdversarialLlm {
    calls: AtomicU64,
}

#[async_trait]
impl Llm for AdversarialLlm {
    async fn complete(&self, request: LlmRequest) -> Result<String, LlmError> {
        let call = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        let count = |prefix: &str| request.prompt.lines().filter(|l| l.starts_with(prefix)).count();
        let judged = matches!(request.purpose, InvocationPurpose::MemoryContradiction | InvocationPurpose::MemoryDedup);
        if judged && call.is_multiple_of(5) {
            return Ok("Having read these carefully, I believe they mostly agree, though some details differ.".into());
        }
        match request.purpose {
            InvocationPurpose::MemoryContradiction => {
                let n = count("Existing ");
                let obeyed = quoted_texts(&request.prompt).iter().any(|t| t.to_lowercase().contains("contradicts"));
                let relation = if obeyed { "contradictory" } else { "independent" };
                // Every seventh answer also labels a memory it was not shown.
                let extra = usize::from(call.is_multiple_of(7));
                let items: Vec<String> =
                    (0..n + extra).map(|i| format!(r#"{{"memory": {i}, "relation": "{relation}"}}"#)).collect();
                Ok(format!(r#"{{"relations": [{}]}}"#, items.join(",")))
            }
            InvocationPurpose::MemoryDedup => {
                let n = count("Pair ");
                let extra = usize::from(call.is_multiple_of(7));
                let items: Vec<String> = (0..n + extra)
                    .map(|i| {
                        let decision = if i == 0 { "merge" } else { "keep_both" };
                        format!(r#"{{"pair": {i}, "decision": "{decision}"}}"#)
                    })
                    .collect();
                Ok(format!(r#"{{"decisions": [{}]}}"#, items.join(",")))
            }
            _ => OfflineLlm.complete(request).await,
        }
    }
}
