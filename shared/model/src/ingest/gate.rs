//! The write gate against memory poisoning (spec 001): how far a memory's source is trusted decides its trust
//! level, and untrusted content never becomes an instruction.
//!
//! - `verified` only from a `human`, or from a `file` named by its git blob SHA (which the file scan then checks
//!   against the repository, lowering a memory whose SHA the repository does not have); any other source's claim
//!   of `verified` is lowered to `unverified`;
//! - `tool_output` and `external` sources are `untrusted`, whatever the message says;
//! - untrusted content is never stored as `procedural` or `preference` memory: such a memory is refused (and with
//!   it its message), rather than silently stored as something else;
//! - the confidence a producer claims is capped by the trust level: unverified at 0.85, untrusted at 0.5, so
//!   neither reaches the confidence above which a contradiction supersedes.

pub use crate::domain::readership::max_confidence;
use crate::domain::{MemoryType, SourceKind, TrustLevel, is_blob_sha};

use super::IngestProvenance;

/// The trust level the memory is stored with, or why its provenance is refused.
pub fn admitted_trust(provenance: &IngestProvenance) -> Result<TrustLevel, String> {
    let claimed = provenance.trust_level;
    let at_most_unverified = match claimed {
        TrustLevel::Verified => TrustLevel::Unverified,
        other => other,
    };
    match provenance.source_kind {
        SourceKind::ToolOutput | SourceKind::External => Ok(TrustLevel::Untrusted),
        SourceKind::Human => Ok(claimed),
        SourceKind::File if provenance.git_blob_sha.as_deref().is_some_and(is_blob_sha) => Ok(claimed),
        SourceKind::File | SourceKind::ConversationTurn | SourceKind::Run | SourceKind::Import => {
            Ok(at_most_unverified)
        }
        other => Err(format!(
            "source_kind {other} is not an extraction source (conversation_turn, run, file, human, tool_output, external, import)"
        )),
    }
}

/// Why a memory of this type may not be stored at this trust level; None when it may.
pub fn forbids_type(memory_type: MemoryType, trust: TrustLevel) -> Option<String> {
    let instruction = matches!(memory_type, MemoryType::Procedural | MemoryType::Preference);
    (instruction && trust == TrustLevel::Untrusted)
        .then(|| format!("untrusted content is never stored as {memory_type} memory (it would become an instruction)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provenance(kind: SourceKind, trust: TrustLevel, sha: Option<&str>) -> IngestProvenance {
        IngestProvenance {
            source_kind: kind,
            source_ref: "ref".into(),
            git_blob_sha: sha.map(str::to_string),
            trust_level: trust,
        }
    }

    #[test]
    fn only_humans_and_files_with_a_blob_sha_are_verified() {
        let sha = "a".repeat(40);
        let verified = |kind, sha| admitted_trust(&provenance(kind, TrustLevel::Verified, sha)).unwrap();
        assert_eq!(verified(SourceKind::Human, None), TrustLevel::Verified);
        assert_eq!(verified(SourceKind::File, Some(sha.as_str())), TrustLevel::Verified);
        assert_eq!(verified(SourceKind::File, Some("not-a-sha")), TrustLevel::Unverified);
        assert_eq!(verified(SourceKind::File, None), TrustLevel::Unverified);
        assert_eq!(verified(SourceKind::ConversationTurn, None), TrustLevel::Unverified);
        assert_eq!(verified(SourceKind::Run, None), TrustLevel::Unverified);
    }

    #[test]
    fn tool_output_and_external_are_untrusted_whatever_they_claim() {
        for kind in [SourceKind::ToolOutput, SourceKind::External] {
            assert_eq!(admitted_trust(&provenance(kind, TrustLevel::Verified, None)).unwrap(), TrustLevel::Untrusted);
        }
        assert!(admitted_trust(&provenance(SourceKind::Merge, TrustLevel::Unverified, None)).is_err());
    }

    #[test]
    fn untrusted_instructions_are_refused() {
        assert!(forbids_type(MemoryType::Procedural, TrustLevel::Untrusted).is_some());
        assert!(forbids_type(MemoryType::Preference, TrustLevel::Untrusted).is_some());
        assert!(forbids_type(MemoryType::Episodic, TrustLevel::Untrusted).is_none());
        assert!(forbids_type(MemoryType::Procedural, TrustLevel::Unverified).is_none());
    }
}
