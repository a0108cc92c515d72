//! Directories only their owner may enter: the sandbox directory, the audit log's, the
//! package cache, approval files, state and egress sockets. Made here, in one way, so none of
//! them is ever created with the umask's wider mode.

use std::os::unix::fs::DirBuilderExt;
use std::path::Path;

/// Makes `path` and any missing parents with mode 0700. A directory that already exists is
/// left as its owner made it (callers that must refuse a wider one check it themselves).
pub fn create(path: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn every_directory_made_is_private_and_an_existing_one_is_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let deep = tmp.path().join("a/b/c");
        super::create(&deep).unwrap();
        for d in ["a", "a/b", "a/b/c"] {
            let mode = std::fs::metadata(tmp.path().join(d))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o700, "{d}");
        }
        let open = tmp.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
        super::create(&open).unwrap();
        let mode = std::fs::metadata(&open).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o755);
    }
}
