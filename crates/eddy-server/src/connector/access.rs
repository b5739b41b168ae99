//! Which files connectors may touch.
//!
//! A program names files (`file_input`, `file_output`, librdkafka's
//! `*.location` settings), and programs come from clients: a server must
//! not let them read or write wherever its user can. File connectors work
//! inside the data directory's `files/` folder, where relative paths
//! resolve, and inside folders the operator allows with `--file-dir`.
//! A path is checked twice: by its text when the program is defined (no
//! `..`, inside an allowed folder), and again when it is opened, after
//! symbolic links are resolved.

use std::path::{Component, Path, PathBuf};

/// The folders file connectors may use.
#[derive(Debug, Clone)]
pub struct FileAccess {
    /// `<data-dir>/files`, where relative paths resolve.
    root: PathBuf,
    /// Every allowed folder, the root first, with links resolved.
    allowed: Vec<PathBuf>,
}

impl FileAccess {
    /// Allows `<data_dir>/files` (created if missing) and `extra` folders
    /// (which must exist).
    pub fn new(data_dir: &Path, extra: &[PathBuf]) -> std::io::Result<Self> {
        let root = data_dir.join("files");
        std::fs::create_dir_all(&root)?;
        let root = root.canonicalize()?;
        let mut allowed = vec![root.clone()];
        for dir in extra {
            allowed.push(dir.canonicalize().map_err(|e| {
                std::io::Error::new(e.kind(), format!("--file-dir '{}': {e}", dir.display()))
            })?);
        }
        Ok(Self { root, allowed })
    }

    /// The folder relative paths resolve against.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn allows(&self, path: &Path) -> bool {
        self.allowed.iter().any(|dir| path.starts_with(dir))
    }

    fn refused(&self, path: &str) -> String {
        let folders: Vec<String> = self
            .allowed
            .iter()
            .map(|p| format!("'{}'", p.display()))
            .collect();
        format!(
            "'{path}' is outside the folders file connectors may use ({}); \
             a relative path is read from the first of them",
            folders.join(", ")
        )
    }

    /// Checks a path by its text: where it would be, if it may be there.
    pub fn check(&self, path: &str) -> Result<PathBuf, String> {
        let p = Path::new(path);
        if path.is_empty() || path.contains('\0') {
            return Err(format!("'{path}' is not a file path"));
        }
        if p.components().any(|c| matches!(c, Component::ParentDir)) {
            return Err(format!("'{path}': paths may not contain '..'"));
        }
        let full = if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.root.join(p)
        };
        if self.allows(&full) {
            Ok(full)
        } else {
            Err(self.refused(path))
        }
    }

    /// Resolves a path to open: checked by its text, then again once
    /// symbolic links are followed (for a file that does not exist yet, its
    /// folder's links).
    pub fn resolve(&self, path: &str) -> Result<PathBuf, String> {
        let full = self.check(path)?;
        let real = match full.canonicalize() {
            Ok(real) => real,
            Err(_) => {
                let (Some(parent), Some(name)) = (full.parent(), full.file_name()) else {
                    return Err(format!("'{path}' is not a file path"));
                };
                parent
                    .canonicalize()
                    .map_err(|e| format!("'{path}': {e}"))?
                    .join(name)
            }
        };
        if self.allows(&real) {
            Ok(real)
        } else {
            Err(self.refused(path))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_inside_allowed_folders() {
        let base = std::env::temp_dir().join(format!("eddy-access-{}", std::process::id()));
        let data = base.join("data");
        let extra = base.join("extra");
        std::fs::create_dir_all(&extra).unwrap();
        let access = FileAccess::new(&data, std::slice::from_ref(&extra)).unwrap();
        let root = access.root().to_path_buf();
        assert_eq!(access.resolve("in.json").unwrap(), root.join("in.json"));
        let inside = extra.canonicalize().unwrap().join("x.csv");
        assert_eq!(
            access.resolve(inside.to_str().unwrap()).unwrap(),
            inside.clone()
        );
        assert!(access.check("/etc/passwd").is_err());
        assert!(access.check("../pipelines/p.json").is_err());
        assert!(access.check("sub/../../x").is_err());
        assert!(access.check("").is_err());
        // A link inside the root that points outside is refused when opened.
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink("/etc", root.join("etc")).unwrap();
            assert!(access.check("etc/passwd").is_ok());
            assert!(access.resolve("etc/passwd").is_err());
            assert!(access.resolve("etc/new-file").is_err());
        }
        std::fs::remove_dir_all(&base).unwrap();
    }
}
