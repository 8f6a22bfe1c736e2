//! Path rules: VFS paths are absolute, `/`-separated UTF-8 with no NUL, at most
//! `PATH_MAX` bytes and `NAME_MAX` bytes per component. Normalisation removes
//! empty and `.` components and applies `..` lexically, clamped at `/`, so no
//! spelling of a path can climb above the root.

use super::error::FsError;

pub const NAME_MAX: usize = 255;
pub const PATH_MAX: usize = 4096;

/// Splits an absolute path into normalised components.
pub fn components(path: &str) -> Result<Vec<String>, FsError> {
    if path.len() > PATH_MAX {
        return Err(FsError::NameTooLong {
            path: truncate_for_message(path),
        });
    }
    if path.contains('\0') {
        return Err(FsError::invalid(
            &truncate_for_message(path),
            "path contains NUL",
        ));
    }
    if !path.starts_with('/') {
        return Err(FsError::invalid(path, "path must be absolute"));
    }
    let mut out: Vec<String> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            name => {
                if name.len() > NAME_MAX {
                    return Err(FsError::NameTooLong {
                        path: path.to_owned(),
                    });
                }
                out.push(name.to_owned());
            }
        }
    }
    Ok(out)
}

/// The normalised spelling of an absolute path.
pub fn normalize(path: &str) -> Result<String, FsError> {
    Ok(join(&components(path)?))
}

/// Joins components back into an absolute path.
pub fn join<S: AsRef<str>>(parts: &[S]) -> String {
    if parts.is_empty() {
        return "/".to_owned();
    }
    let mut out = String::new();
    for part in parts {
        out.push('/');
        out.push_str(part.as_ref());
    }
    out
}

/// True when `path` is `root` or lies below it (both normalised).
pub fn is_within(path: &str, root: &str) -> bool {
    root == "/"
        || path == root
        || (path.starts_with(root) && path.as_bytes().get(root.len()) == Some(&b'/'))
}

/// Keeps error messages bounded when a caller sends an absurd path.
fn truncate_for_message(path: &str) -> String {
    let mut end = path.len().min(256);
    while !path.is_char_boundary(end) {
        end -= 1;
    }
    path[..end].replace('\0', "\\0")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_and_clamps_dotdot() {
        assert_eq!(normalize("/a//b/./c/..").unwrap(), "/a/b");
        assert_eq!(normalize("/../../x").unwrap(), "/x");
        assert_eq!(normalize("/").unwrap(), "/");
        assert_eq!(normalize("rel").unwrap_err().code().as_str(), "EINVAL");
        assert_eq!(normalize("/a\0b").unwrap_err().code().as_str(), "EINVAL");
        let long = format!("/{}", "n".repeat(256));
        assert_eq!(
            normalize(&long).unwrap_err().code().as_str(),
            "ENAMETOOLONG"
        );
        let deep = "/a".repeat(2100);
        assert_eq!(
            normalize(&deep).unwrap_err().code().as_str(),
            "ENAMETOOLONG"
        );
    }

    #[test]
    fn within_respects_component_boundaries() {
        assert!(is_within("/srv/a", "/srv"));
        assert!(is_within("/srv", "/srv"));
        assert!(!is_within("/srvshop", "/srv"));
        assert!(is_within("/anything", "/"));
    }
}
