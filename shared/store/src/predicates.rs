//! WHERE-clause builders: the Stage 1 scope filter and the search metadata filters, rendered with bound
//! parameters only, so they can be pushed into every branch of a search.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::{Postgres, QueryBuilder};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::domain::{MemoryType, Scope};

/// The hard predicate of Stage 1: which memories a principal may read at all. Built from the agent's
/// `memory_read_scopes` (stored in the database, never taken from a request) and the principal's organisation, by
/// the constructor of the operation that reads: [`ReadFilter::for_retrieval`] or [`ReadFilter::for_audit`].
#[derive(Debug, Clone, PartialEq)]
pub struct ReadFilter {
    organization_id: Uuid,
    read_scopes: Vec<Scope>,
    project_id: Option<Uuid>,
    task_id: Option<Uuid>,
    agent_id: Option<Uuid>,
    /// true excludes `restricted` memories.
    sensitivity_gate: bool,
    /// false (retrieval) admits only active, unexpired memories; true (audit reads) admits every status.
    include_inactive: bool,
    /// Direct reads by id: readable project and task scopes admit any project or task of the organisation.
    any_project_or_task: bool,
    /// Retrieval of the archive too: superseded and archived memories beside the active, unexpired ones.
    history: bool,
    /// Retrieval as the store stood then: the memories active and unexpired at that time instead of now.
    active_at: Option<DateTime<Utc>>,
}

impl ReadFilter {
    /// Retrieval and search: active, unexpired memories in `read_scopes`, of the project and task the request names
    /// (project and task scopes admit nothing when it names none), without `restricted` ones behind the gate.
    pub fn for_retrieval(
        organization_id: Uuid,
        read_scopes: Vec<Scope>,
        agent_id: Option<Uuid>,
        project_id: Option<Uuid>,
        task_id: Option<Uuid>,
        sensitivity_gate: bool,
    ) -> Self {
        Self {
            organization_id,
            read_scopes,
            project_id,
            task_id,
            agent_id,
            sensitivity_gate,
            include_inactive: false,
            any_project_or_task: false,
            history: false,
            active_at: None,
        }
    }

    /// The same, admitting the memories that were active and unexpired at `at` (and not forgotten since) instead of
    /// those that are now.
    pub fn at(mut self, at: DateTime<Utc>) -> Self {
        self.active_at = Some(at);
        self
    }

    /// The same, also admitting superseded and archived memories (`include_archive`; never passive injection).
    pub fn with_history(mut self) -> Self {
        self.history = true;
        self
    }

    /// Reads by id and supersession chains: memories of every status in `read_scopes`, of any project and task of
    /// the organisation that those scopes admit, restricted ones included.
    pub fn for_audit(organization_id: Uuid, read_scopes: Vec<Scope>, agent_id: Option<Uuid>) -> Self {
        Self {
            organization_id,
            read_scopes,
            project_id: None,
            task_id: None,
            agent_id,
            sensitivity_gate: false,
            include_inactive: true,
            any_project_or_task: true,
            history: true,
            active_at: None,
        }
    }

    /// The same reach, admitting only active, unexpired memories (a by-id read's current profiles).
    pub fn current_only(mut self) -> Self {
        (self.include_inactive, self.history) = (false, false);
        self
    }

    /// The organisation every query under this filter is bound to.
    pub fn organization_id(&self) -> Uuid {
        self.organization_id
    }

    /// Appends the predicate over alias `m`: organisation, active, not expired, readable scope, sensitivity.
    pub fn push_sql(&self, qb: &mut QueryBuilder<'_, Postgres>) {
        qb.push("m.organization_id = ").push_bind(self.organization_id);
        if let (Some(at), false) = (self.active_at, self.include_inactive) {
            qb.push(" AND m.status <> 'forgotten' AND (m.expires_at IS NULL OR m.expires_at > ")
                .push_bind(at)
                .push(") AND EXISTS (SELECT 1 FROM memory_active_period p WHERE p.organization_id = m.organization_id")
                .push(" AND p.memory_id = m.id AND p.active_from <= ")
                .push_bind(at)
                .push(" AND (p.active_until IS NULL OR p.active_until > ")
                .push_bind(at)
                .push("))");
        } else if !self.include_inactive {
            let current = "m.status = 'active' AND (m.expires_at IS NULL OR m.expires_at > now())";
            if self.history {
                qb.push(format!(" AND (m.status IN ('superseded', 'archived') OR ({current}))"));
            } else {
                qb.push(format!(" AND {current}"));
            }
        }
        qb.push(" AND (");
        let mut any = false;
        let mut or = |qb: &mut QueryBuilder<'_, Postgres>| {
            if any {
                qb.push(" OR ");
            }
            any = true;
        };
        for scope in &self.read_scopes {
            match scope {
                Scope::Org => {
                    or(qb);
                    qb.push("m.scope = 'org'");
                }
                Scope::Project => {
                    if let Some(project_id) = self.project_id {
                        or(qb);
                        qb.push("(m.scope = 'project' AND m.project_id = ").push_bind(project_id).push(")");
                    } else if self.any_project_or_task {
                        or(qb);
                        qb.push("m.scope = 'project'");
                    }
                }
                Scope::Task => {
                    if let Some(task_id) = self.task_id {
                        or(qb);
                        qb.push("(m.scope = 'task' AND m.project_task_id = ").push_bind(task_id).push(")");
                    } else if self.any_project_or_task {
                        or(qb);
                        qb.push("m.scope = 'task'");
                    }
                }
                Scope::AgentPrivate => {
                    if let Some(agent_id) = self.agent_id {
                        or(qb);
                        qb.push("m.agent_id = ").push_bind(agent_id);
                    }
                }
            }
        }
        if !any {
            qb.push("false");
        }
        qb.push(")");
        if self.sensitivity_gate {
            qb.push(" AND m.sensitivity = 'normal'");
        }
    }

    /// The predicate as SQL text with `$n` placeholders (for logs and tests).
    pub fn to_sql(&self) -> String {
        let mut qb = QueryBuilder::new("");
        self.push_sql(&mut qb);
        qb.into_sql()
    }
}

/// Metadata filters of a search, evaluated inside each branch's SQL (never after, which would distort top-k).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchFilters {
    pub project_id: Option<Uuid>,
    pub agent_id: Option<Uuid>,
    #[serde(default)]
    pub memory_types: Vec<MemoryType>,
    /// Memories carrying at least one of these tags.
    #[serde(default)]
    pub tags_any: Vec<String>,
    /// Memories carrying all of these tags.
    #[serde(default)]
    pub tags_all: Vec<String>,
    /// Key/value labels that must all be present.
    #[serde(default)]
    pub labels: std::collections::BTreeMap<String, String>,
    pub created_after: Option<DateTime<Utc>>,
    pub created_before: Option<DateTime<Utc>>,
    pub updated_after: Option<DateTime<Utc>>,
    pub updated_before: Option<DateTime<Utc>>,
    pub min_confidence: Option<f64>,
    /// File-backed memories of files in this language (`rust`, `python`, `typescript`, `markdown`, ...).
    pub language: Option<String>,
    /// File-backed memories of files under this path (`src/auth/`).
    pub path_prefix: Option<String>,
    /// Memories of this repository, by name.
    pub repository: Option<String>,
    /// Also superseded and archived memories, each with its status and successor (`superseded_by`).
    #[serde(default)]
    pub include_archive: bool,
    /// The memories as they were active at this time (RFC 3339), their chains cut there; not with
    /// `include_archive`.
    pub as_of: Option<DateTime<Utc>>,
}

/// The longest text filter (a path prefix, a repository), in bytes.
pub const MAX_FILTER_TEXT_BYTES: usize = 1000;

/// Values per list filter (tags, labels, memory types).
pub const MAX_FILTER_VALUES: usize = 32;

impl SearchFilters {
    /// Why these filters are refused (too many values, an empty date range); None when they are fine.
    pub fn problem(&self) -> Option<String> {
        let longest = [self.tags_any.len(), self.tags_all.len(), self.labels.len(), self.memory_types.len()]
            .into_iter()
            .max()
            .unwrap_or(0);
        if longest > MAX_FILTER_VALUES {
            return Some(format!("a filter lists at most {MAX_FILTER_VALUES} values"));
        }
        let empty = |after: Option<DateTime<Utc>>, before: Option<DateTime<Utc>>| {
            after.zip(before).is_some_and(|(a, b)| a >= b)
        };
        if empty(self.created_after, self.created_before) || empty(self.updated_after, self.updated_before) {
            return Some("a date range must end after it starts".into());
        }
        let texts = [&self.language, &self.path_prefix, &self.repository];
        if texts.iter().any(|t| t.as_ref().is_some_and(|t| t.is_empty() || t.len() > MAX_FILTER_TEXT_BYTES)) {
            return Some(format!("language, path_prefix and repository have 1 to {MAX_FILTER_TEXT_BYTES} bytes"));
        }
        if self.language.as_deref().is_some_and(|l| crate::language::Language::parse(l).is_none()) {
            let known: Vec<&str> = crate::language::Language::ALL.iter().map(|l| l.as_str()).collect();
            return Some(format!("language is one of {}", known.join(", ")));
        }
        if self.min_confidence.is_some_and(|c| !(0.0..=1.0).contains(&c)) {
            return Some("min_confidence must be within 0-1".into());
        }
        None
    }

    /// Whether no filter is set.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Appends ` AND ...` for every filter that is set.
    pub fn push_sql(&self, qb: &mut QueryBuilder<'_, Postgres>) {
        if let Some(v) = self.project_id {
            qb.push(" AND m.project_id = ").push_bind(v);
        }
        if let Some(v) = self.agent_id {
            qb.push(" AND m.agent_id = ").push_bind(v);
        }
        if !self.memory_types.is_empty() {
            qb.push(" AND m.memory_type = ANY(").push_bind(self.memory_types.clone()).push(")");
        }
        if !self.tags_any.is_empty() {
            qb.push(" AND m.tags && ").push_bind(self.tags_any.clone());
        }
        if !self.tags_all.is_empty() {
            qb.push(" AND m.tags @> ").push_bind(self.tags_all.clone());
        }
        if !self.labels.is_empty() {
            qb.push(" AND m.labels @> ").push_bind(sqlx::types::Json(self.labels.clone()));
        }
        if let Some(v) = self.created_after {
            qb.push(" AND m.created_at >= ").push_bind(v);
        }
        if let Some(v) = self.created_before {
            qb.push(" AND m.created_at < ").push_bind(v);
        }
        if let Some(v) = self.updated_after {
            qb.push(" AND m.updated_at >= ").push_bind(v);
        }
        if let Some(v) = self.updated_before {
            qb.push(" AND m.updated_at < ").push_bind(v);
        }
        if let Some(v) = self.min_confidence {
            qb.push(" AND m.confidence >= ").push_bind(v);
        }
        if let Some(v) = &self.language {
            qb.push(" AND m.language = ").push_bind(v.clone());
        }
        if let Some(v) = &self.path_prefix {
            qb.push(" AND starts_with(m.file_path, ").push_bind(v.clone()).push(")");
        }
        if let Some(v) = &self.repository {
            qb.push(" AND m.repository = ").push_bind(v.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(read_scopes: Vec<Scope>, gate: bool) -> ReadFilter {
        ReadFilter {
            organization_id: Uuid::now_v7(),
            read_scopes,
            project_id: Some(Uuid::now_v7()),
            task_id: Some(Uuid::now_v7()),
            agent_id: Some(Uuid::now_v7()),
            sensitivity_gate: gate,
            include_inactive: false,
            any_project_or_task: false,
            history: false,
            active_at: None,
        }
    }

    #[test]
    fn org_and_project_scopes_both_appear_in_the_where_clause() {
        let sql = filter(vec![Scope::Org, Scope::Project], false).to_sql();
        assert_eq!(
            sql,
            "m.organization_id = $1 AND m.status = 'active' AND (m.expires_at IS NULL OR m.expires_at > now()) \
             AND (m.scope = 'org' OR (m.scope = 'project' AND m.project_id = $2))"
        );
    }

    #[test]
    fn sensitivity_gate_adds_normal_only() {
        let sql = filter(vec![Scope::Org], true).to_sql();
        assert!(sql.ends_with("AND (m.scope = 'org') AND m.sensitivity = 'normal'"), "{sql}");
        assert!(!filter(vec![Scope::Org], false).to_sql().contains("sensitivity"));
    }

    #[test]
    fn agent_private_matches_the_agent_whatever_the_scope_column() {
        let sql = filter(vec![Scope::AgentPrivate, Scope::Task], false).to_sql();
        assert!(sql.contains("(m.agent_id = $2 OR (m.scope = 'task' AND m.project_task_id = $3))"), "{sql}");
    }

    #[test]
    fn no_readable_scope_matches_nothing_and_a_missing_project_drops_the_project_scope() {
        assert!(filter(vec![], false).to_sql().contains("AND (false)"));
        let mut f = filter(vec![Scope::Project], false);
        f.project_id = None;
        assert!(f.to_sql().contains("AND (false)"));
    }
}
