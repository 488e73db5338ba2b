//! What a forget request names.

use uuid::Uuid;

/// What to forget in an organisation.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ForgetSelector {
    /// These memories.
    Memories(Vec<Uuid>),
    /// The memories an ingest batch wrote.
    Batch(String),
    /// The memories whose source reference starts so (a run, a conversation, a person).
    SourceRefPrefix(String),
    /// An agent's memories (those it wrote, whatever their scope).
    Agent(Uuid),
    /// A project's memories.
    Project(Uuid),
    /// Every memory of the organisation.
    Organization,
}

/// What a forget request reaches: the memories `selector` matches, and with `sender` only those that sender's batches
/// wrote (a producer whose grant does not say organisation-wide).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forgetting {
    pub selector: ForgetSelector,
    pub sender: Option<String>,
}

impl Forgetting {
    /// Everything the selector matches (an operator's request).
    pub fn all(selector: ForgetSelector) -> Self {
        Self { selector, sender: None }
    }
}
