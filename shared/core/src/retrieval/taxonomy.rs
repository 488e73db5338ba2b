//! Stages 2 and 3: classify a query into taxonomy nodes (keyword rules, or the LLM) and expand them to subtrees.

use std::{
    collections::{HashMap, HashSet},
    time::Duration,
};

use serde::Deserialize;
use uuid::Uuid;

use crate::{
    domain::TaxonomyNode,
    llm::{InvocationPurpose, Llm, LlmError, LlmRequest, parse_json},
};

/// Most nodes a query is classified into.
pub const MAX_NODES: usize = 3;

/// An organisation's taxonomy tree.
pub struct Taxonomy {
    nodes: HashMap<Uuid, TaxonomyNode>,
    children: HashMap<Uuid, Vec<Uuid>>,
}

impl Taxonomy {
    pub fn new(nodes: Vec<TaxonomyNode>) -> Self {
        let mut children: HashMap<Uuid, Vec<Uuid>> = HashMap::new();
        for node in &nodes {
            if let Some(parent) = node.parent_id {
                children.entry(parent).or_default().push(node.id);
            }
        }
        Self { nodes: nodes.into_iter().map(|n| (n.id, n)).collect(), children }
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// "workflow/git" for node git under workflow.
    pub fn path(&self, id: Uuid) -> String {
        let mut parts = Vec::new();
        let mut current = self.nodes.get(&id);
        while let Some(node) = current {
            parts.push(node.name.as_str());
            // A corrupt tree with a cycle must not loop forever.
            if parts.len() > self.nodes.len() {
                break;
            }
            current = node.parent_id.and_then(|p| self.nodes.get(&p));
        }
        parts.reverse();
        parts.join("/")
    }

    fn depth(&self, id: Uuid) -> usize {
        self.path(id).matches('/').count()
    }

    /// The given nodes and all their descendants.
    pub fn subtree(&self, roots: &[Uuid]) -> HashSet<Uuid> {
        let mut seen = HashSet::new();
        let mut stack: Vec<Uuid> = roots.to_vec();
        while let Some(id) = stack.pop() {
            if seen.insert(id) {
                stack.extend(self.children.get(&id).into_iter().flatten().copied());
            }
        }
        seen
    }

    /// Rule-based classification: a node matches when every word of its name occurs in the query. Nodes whose
    /// names match more words win, then deeper nodes, then by path; at most [`MAX_NODES`].
    pub fn classify_by_rules(&self, query: &str) -> Vec<Uuid> {
        let words: HashSet<String> = words(query).collect();
        let mut matches: Vec<(usize, usize, String, Uuid)> = self
            .nodes
            .values()
            .filter_map(|node| {
                let name_words: Vec<String> = words_of_name(&node.name).collect();
                let all = !name_words.is_empty() && name_words.iter().all(|w| words.contains(w));
                all.then(|| (name_words.len(), self.depth(node.id), self.path(node.id), node.id))
            })
            .collect();
        matches.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)).then(a.2.cmp(&b.2)));
        matches.into_iter().take(MAX_NODES).map(|m| m.3).collect()
    }

    /// LLM classification (invocation_purpose = memory_retrieval), bounded by `timeout`.
    pub async fn classify_with_llm(
        &self,
        llm: &dyn Llm,
        query: &str,
        timeout: Duration,
    ) -> Result<Vec<Uuid>, LlmError> {
        let mut paths: Vec<(String, Uuid)> = self.nodes.keys().map(|id| (self.path(*id), *id)).collect();
        paths.sort();
        let listing: String = paths.iter().map(|(p, _)| format!("- {p}\n")).collect();
        let request = LlmRequest {
            purpose: InvocationPurpose::MemoryRetrieval,
            system: format!(
                "You classify a query into an organisation's memory taxonomy. Answer with JSON only: \
                 {{\"nodes\": [\"path\", ...]}} naming at most {MAX_NODES} paths from the list, most relevant \
                 first, or an empty list when none fits."
            ),
            prompt: format!("Taxonomy:\n{listing}\nQuery: {query}"),
            max_tokens: 200,
        };
        let answer = llm.complete_within(request, timeout).await?;
        #[derive(Deserialize)]
        struct Answer {
            nodes: Vec<String>,
        }
        let answer: Answer = parse_json(&answer)?;
        let by_path: HashMap<String, Uuid> = paths.into_iter().map(|(p, id)| (p.to_lowercase(), id)).collect();
        let mut ids: Vec<Uuid> = Vec::new();
        for path in answer.nodes {
            if let Some(id) = by_path.get(&path.trim().trim_matches('/').to_lowercase())
                && !ids.contains(id)
            {
                ids.push(*id);
            }
        }
        ids.truncate(MAX_NODES);
        Ok(ids)
    }
}

/// Lower-case alphanumeric words, with a plural "s" dropped so "preferences" matches "preference".
fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(|w| singular(&w.to_lowercase()))
}

fn words_of_name(name: &str) -> impl Iterator<Item = String> + '_ {
    words(name)
}

fn singular(word: &str) -> String {
    if word.len() > 3 && word.ends_with('s') && !word.ends_with("ss") {
        word[..word.len() - 1].to_string()
    } else {
        word.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, parent: Option<Uuid>) -> TaxonomyNode {
        TaxonomyNode { id: Uuid::now_v7(), parent_id: parent, name: name.into() }
    }

    #[test]
    fn rules_match_whole_words_of_node_names_and_subtrees_include_descendants() {
        let workflow = node("workflow", None);
        let git = node("git", Some(workflow.id));
        let prefs = node("preferences", None);
        let code_review = node("code review", Some(workflow.id));
        let taxonomy = Taxonomy::new(vec![workflow.clone(), git.clone(), prefs.clone(), code_review.clone()]);

        assert_eq!(taxonomy.classify_by_rules("how does our workflow handle this?"), vec![workflow.id]);
        assert_eq!(taxonomy.classify_by_rules("What are the user's PREFERENCE settings"), vec![prefs.id]);
        assert_eq!(taxonomy.classify_by_rules("before the code review"), vec![code_review.id]);
        assert!(taxonomy.classify_by_rules("gitlab pipelines").is_empty());
        assert_eq!(taxonomy.path(git.id), "workflow/git");
        assert_eq!(taxonomy.subtree(&[workflow.id]), HashSet::from([workflow.id, git.id, code_review.id]));
    }
}
