//! The agent tools: the one list of their names, descriptions and input schemas, which `GET /v1/tools`, MCP's
//! `tools/list` and `tools/call`, the routes and [`super::tools::call`] read.

use utoipa::PartialSchema;

use super::{
    retrieve::MemoryQueryInput,
    search::SearchBody,
    system::ToolDefinition,
    tools::{CodeSearchInput, MemoryIdInput, ReadFileRangeInput, ReadSymbolInput},
};

/// One tool of the catalogue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    MemoryQuery,
    SearchLexical,
    SearchSemantic,
    Search,
    GetMemory,
    MemoryChain,
    ReadSymbol,
    ReadFileRange,
}

impl Tool {
    /// In the catalogue's order.
    pub const ALL: [Tool; 8] = [
        Tool::MemoryQuery,
        Tool::SearchLexical,
        Tool::SearchSemantic,
        Tool::Search,
        Tool::GetMemory,
        Tool::MemoryChain,
        Tool::ReadSymbol,
        Tool::ReadFileRange,
    ];

    /// Its name, as agents call it.
    pub fn name(self) -> &'static str {
        match self {
            Tool::MemoryQuery => "memory.query",
            Tool::SearchLexical => "search_lexical",
            Tool::SearchSemantic => "search_semantic",
            Tool::Search => "search",
            Tool::GetMemory => "get_memory",
            Tool::MemoryChain => "memory_chain",
            Tool::ReadSymbol => "read_symbol",
            Tool::ReadFileRange => "read_file_range",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|tool| tool.name() == name)
    }

    /// The route of a tool that has one of its own.
    pub fn path(self) -> String {
        format!("/v1/tools/{}", self.name())
    }

    fn description(self) -> &'static str {
        match self {
            Tool::MemoryQuery => {
                "Search the organisation's long-term memory for facts, decisions, procedures and preferences relevant \
             to a question. Returns the most relevant memories last."
            }
            Tool::SearchLexical => {
                "Keyword search over memories and the chunks of the organisation's repositories: exact words, \
             identifiers in any case style, paths and error codes. Filters: language, path_prefix, repository."
            }
            Tool::SearchSemantic => {
                "Semantic search over memories and repository chunks by meaning (what the code does). Filters: \
             language, path_prefix, repository."
            }
            Tool::Search => {
                "Search memories by strategy (vector, keyword, hybrid, graph, metadata) with metadata filters; hits \
             most relevant first."
            }
            Tool::GetMemory => "One memory by id, in any status (superseded and archived ones too).",
            Tool::MemoryChain => {
                "The supersession chain through a memory, oldest first: what it replaced and what replaced it."
            }
            Tool::ReadSymbol => {
                "Read one declaration (or Markdown section) of a project's repository as it is now, by its symbol \
             path as search hits name it (anchor.symbol)."
            }
            Tool::ReadFileRange => {
                "Read lines of a file of a project's repository as it is now (at most 400 at a time)."
            }
        }
    }

    fn input_schema(self) -> serde_json::Value {
        fn schema<T: PartialSchema>() -> serde_json::Value {
            serde_json::to_value(T::schema()).expect("a schema serialises")
        }
        match self {
            Tool::MemoryQuery => schema::<MemoryQueryInput>(),
            Tool::SearchLexical => schema::<CodeSearchInput>(),
            Tool::SearchSemantic => schema::<CodeSearchInput>(),
            Tool::Search => schema::<SearchBody>(),
            Tool::GetMemory => schema::<MemoryIdInput>(),
            Tool::MemoryChain => schema::<MemoryIdInput>(),
            Tool::ReadSymbol => schema::<ReadSymbolInput>(),
            Tool::ReadFileRange => schema::<ReadFileRangeInput>(),
        }
    }

    pub fn definition(self) -> ToolDefinition {
        ToolDefinition {
            name: self.name().into(),
            description: self.description().into(),
            input_schema: self.input_schema(),
        }
    }
}
