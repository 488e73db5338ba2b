//! Files of a repository that never become memory and are never served: secrets by their names ([`SECRETS`], extended
//! by `MEMORY_IMPORT_EXCLUDE`), and, on import, what the repository's own `.gitignore` files ignore (a file committed
//! by force is still one its authors meant to keep out). Patterns are `.gitignore` lines.

use ignore::gitignore::{Gitignore, GitignoreBuilder};

use super::reader::{FileReadError, Snapshot, SnapshotFile};

/// Names that hold secrets: environment files, private keys and certificates, key stores, credentials files and
/// Terraform state and variables.
pub const SECRETS: &[&str] = &[
    ".env",
    ".env.*",
    "*.env",
    ".envrc",
    "*.pem",
    "*.key",
    "*.crt",
    "*.cer",
    "*.der",
    "*.p12",
    "*.pfx",
    "*.jks",
    "*.keystore",
    "*.kdbx",
    "*.ppk",
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
    "*.tfstate",
    "*.tfstate.*",
    "*.tfvars",
    ".npmrc",
    ".pypirc",
    ".netrc",
    ".git-credentials",
    ".htpasswd",
    "**/.aws/credentials",
    "**/.docker/config.json",
    "credentials.json",
    "secrets.yml",
    "secrets.yaml",
    "secrets.json",
];

/// The variable naming more patterns, comma-separated.
pub const EXCLUDE_VARIABLE: &str = "MEMORY_IMPORT_EXCLUDE";

fn invalid(pattern: &str, e: ignore::Error) -> crate::config::ConfigError {
    crate::config::ConfigError::Invalid { name: EXCLUDE_VARIABLE, value: pattern.to_string(), reason: e.to_string() }
}

/// Why a path is excluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Excluded {
    /// A name that holds secrets ([`SECRETS`] or the operator's patterns).
    Secret,
    /// What a `.gitignore` of the repository ignores.
    Ignored,
}

/// The secret names, and the `.gitignore` files of one snapshot (each applying under its own folder).
pub struct Exclusions {
    secrets: Gitignore,
    /// (folder with a trailing `/`, or "" for the root; its `.gitignore`), shallowest first.
    ignores: Vec<(String, Gitignore)>,
}

impl Exclusions {
    /// The secret names, with the operator's patterns (`MEMORY_IMPORT_EXCLUDE`).
    pub fn secrets() -> Result<Self, crate::config::ConfigError> {
        let extra = std::env::var(EXCLUDE_VARIABLE).unwrap_or_default();
        Self::with_patterns(extra.split(',').map(str::trim).filter(|p| !p.is_empty()))
    }

    /// The secret names and `patterns`.
    pub fn with_patterns<'p>(patterns: impl IntoIterator<Item = &'p str>) -> Result<Self, crate::config::ConfigError> {
        let mut builder = GitignoreBuilder::new("");
        for pattern in SECRETS.iter().copied().chain(patterns) {
            builder.add_line(None, pattern).map_err(|e| invalid(pattern, e))?;
        }
        let secrets = builder.build().map_err(|e| invalid("", e))?;
        Ok(Self { secrets, ignores: Vec::new() })
    }

    /// Adds the `.gitignore` files among `files` of `snapshot` (each read up to 1 MiB; one that cannot be read or
    /// parsed adds nothing).
    pub fn with_gitignores(mut self, snapshot: &Snapshot, files: &[SnapshotFile]) -> Result<Self, FileReadError> {
        let mut found: Vec<(String, Gitignore)> = Vec::new();
        for file in files.iter().filter(|f| f.path == ".gitignore" || f.path.ends_with("/.gitignore")) {
            let folder = &file.path[..file.path.len() - ".gitignore".len()];
            let Some(bytes) = snapshot.read(&file.path, 1 << 20).ok().flatten() else { continue };
            let mut builder = GitignoreBuilder::new("");
            for line in String::from_utf8_lossy(&bytes).lines() {
                // A line that does not parse is skipped, as git does.
                let _ = builder.add_line(None, line);
            }
            if let Ok(gitignore) = builder.build() {
                found.push((folder.to_string(), gitignore));
            }
        }
        found.sort_by_key(|(folder, _)| folder.matches('/').count());
        self.ignores = found;
        Ok(self)
    }

    /// Whether `path` (relative to the repository) is excluded, and why.
    pub fn check(&self, path: &str) -> Option<Excluded> {
        // `a/./b` is `a/b`.
        let normal: Vec<&str> = path.split('/').filter(|part| !part.is_empty() && *part != ".").collect();
        let path = normal.join("/");
        let path = path.as_str();
        if self.secrets.matched_path_or_any_parents(path, false).is_ignore() {
            return Some(Excluded::Secret);
        }
        // The deepest `.gitignore` with a say decides, as in git.
        let mut ignored = false;
        for (folder, gitignore) in &self.ignores {
            let Some(relative) = path.strip_prefix(folder.as_str()) else { continue };
            let matched = gitignore.matched_path_or_any_parents(relative, false);
            if matched.is_ignore() {
                ignored = true;
            } else if matched.is_whitelist() {
                ignored = false;
            }
        }
        ignored.then_some(Excluded::Ignored)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_names_are_excluded_and_source_files_are_not() {
        let exclusions = Exclusions::with_patterns(["*.secret", "private/"]).unwrap();
        for secret in [
            ".env",
            "config/.env.production",
            "deploy/prod.env",
            "certs/server.pem",
            "keys/id_rsa",
            "infra/terraform.tfstate",
            "infra/terraform.tfstate.backup",
            "a.secret",
            "private/notes.md",
            "home/.aws/credentials",
            ".aws/./credentials",
        ] {
            assert_eq!(exclusions.check(secret), Some(Excluded::Secret), "{secret}");
        }
        for plain in ["src/env.rs", "src/keys.rs", "README.md", "environment.md", "src/tfstate.go"] {
            assert_eq!(exclusions.check(plain), None, "{plain}");
        }
    }
}
