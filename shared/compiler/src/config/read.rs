//! Reading a config directory from disk: the one way every command that
//! takes a config directory (validate, up, plan, serve, release, configs
//! push, whole or one application's part) gets its files.
//!
//! A config directory is often a checkout of a repository anyone may send a
//! pull request to, validated by a CI runner. So what is read is bounded
//! and only ordinary: a regular file (after following links) of at most
//! [`MAX_FILE_BYTES`], read through a bounded reader and opened without
//! blocking (a FIFO would wait for a writer for ever; a device's length is
//! 0, so `/dev/zero` would be read until memory runs out); links stay in
//! the directory unless [`ReadOptions::allow_external_links`]; each
//! directory is read once, so link loops end. Anything else is refused,
//! naming the file and why, and nothing of the directory is returned.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ffi::OsStr;
use std::fs::{File, FileType, Metadata};
use std::io::Read;
use std::path::{Path, PathBuf};

use vergence_model::{ConfigBundle, Error, Result, check_bundle_path};

use super::MAX_FILE_BYTES;

/// How a config directory is read.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReadOptions {
    /// Follow links that lead out of the config directory. Off by default:
    /// what a config is made of is then exactly what is in its directory
    /// (and its repository), not whatever a link in it points at on the
    /// machine reading it.
    pub allow_external_links: bool,
}

/// Reads every `*.yaml` / `*.yml` file under `dir` into a bundle, and the
/// `*.json` files services may point at (an ECS task definition), skipping
/// hidden files and directories (such as `.vergence`, where local state
/// lives), with the default [`ReadOptions`].
pub fn read_dir(dir: &Path) -> Result<ConfigBundle> {
    read_dir_with(dir, ReadOptions::default())
}

/// [`read_dir`] with `options`.
pub fn read_dir_with(dir: &Path, options: ReadOptions) -> Result<ConfigBundle> {
    let root = dir.canonicalize().map_err(|source| Error::ReadConfig {
        path: dir.display().to_string(),
        source,
    })?;
    let mut walk = Walk {
        shown: dir,
        root: root.clone(),
        options,
        files: BTreeMap::new(),
        read: HashMap::from([(root.clone(), String::new())]),
        linked: VecDeque::new(),
    };
    // The real directories first, then those reached through links: a
    // link to a directory that is read anyway is then always the one
    // refused, whatever the names sort as.
    walk.directory(&root, "")?;
    while let Some(link) = walk.linked.pop_front() {
        walk.linked_directory(link)?;
    }
    if walk.files.is_empty() {
        return Err(Error::invalid(
            "config",
            format!("no *.yaml files found in {}", dir.display()),
        ));
    }
    let mut bundle = ConfigBundle::from_files(walk.files);
    bundle.root = Some(root.display().to_string());
    Ok(bundle)
}

/// A link to a directory, followed once the real directories are read.
struct Link {
    /// Relative to the config root, as reached.
    relative: String,
    /// The directory it points at, with every link resolved.
    target: PathBuf,
    /// The directory the link is in, with every link resolved.
    parent: PathBuf,
}

struct Walk<'a> {
    /// The directory as it was given, to name files in errors.
    shown: &'a Path,
    /// The directory with every link resolved.
    root: PathBuf,
    options: ReadOptions,
    files: BTreeMap<String, String>,
    /// Each directory read (links resolved), and as what.
    read: HashMap<PathBuf, String>,
    linked: VecDeque<Link>,
}

impl Walk<'_> {
    /// An error naming `relative`, the file or directory at fault.
    fn refuse(&self, relative: &str, reason: impl Into<String>) -> Error {
        Error::invalid(self.shown.join(relative).display().to_string(), reason)
    }

    /// Reads the directory at `real` (links resolved), which is `relative`
    /// in the config.
    fn directory(&mut self, real: &Path, relative: &str) -> Result<()> {
        let listing = std::fs::read_dir(real).map_err(|e| self.io(relative, e))?;
        let mut names = Vec::new();
        for entry in listing {
            names.push(entry.map_err(|e| self.io(relative, e))?.file_name());
        }
        names.sort();
        for name in names {
            // Hidden entries (`.vergence`, `.git`) are not config.
            if name.as_encoded_bytes().starts_with(b".") {
                continue;
            }
            let path = real.join(&name);
            let utf8 = name.to_str().is_some();
            let relative = join(relative, &name);
            let meta = std::fs::symlink_metadata(&path).map_err(|e| self.io(&relative, e))?;
            if meta.file_type().is_symlink() {
                self.link(&path, real, &name, relative, utf8)?;
            } else if !utf8 && (meta.is_dir() || is_config_file(&name)) {
                return Err(self.not_utf8(&relative));
            } else if meta.is_dir() {
                // `path` has no link in it: `real` has none, nor has `name`.
                if let Some(already) = self.read.get(&path) {
                    return Err(self.refuse(
                        &relative,
                        format!("is read already as {already}; its files would be read twice"),
                    ));
                }
                self.read.insert(path.clone(), relative.clone());
                self.directory(&path, &relative)?;
            } else if is_config_file(&name) {
                self.file(&path, &meta, &relative)?;
            }
        }
        Ok(())
    }

    /// The link at `path`, in directory `parent` (links resolved).
    fn link(
        &mut self,
        path: &Path,
        parent: &Path,
        name: &OsStr,
        relative: String,
        utf8: bool,
    ) -> Result<()> {
        let target = match path.canonicalize() {
            Ok(target) => target,
            Err(e) => {
                let to = std::fs::read_link(path)
                    .map_or_else(|_| "?".to_owned(), |to| to.display().to_string());
                return Err(self.refuse(
                    &relative,
                    format!("is a link to {to}, which cannot be followed: {e}"),
                ));
            }
        };
        let meta = std::fs::metadata(&target).map_err(|e| self.io(&relative, e))?;
        let read = meta.is_dir() || is_config_file(name);
        if !read {
            // Not config (a README, a script): not read, so not refused.
            return Ok(());
        }
        if !utf8 {
            return Err(self.not_utf8(&relative));
        }
        if !meta.is_dir() && !meta.is_file() {
            return Err(self.refuse(
                &relative,
                format!(
                    "is a link to {}, which is {}, not a regular file",
                    target.display(),
                    kind(&meta.file_type())
                ),
            ));
        }
        if !self.options.allow_external_links && !target.starts_with(&self.root) {
            return Err(self.refuse(
                &relative,
                format!(
                    "is a link to {}, outside the config directory; pass --allow-external-links to read it",
                    target.display()
                ),
            ));
        }
        if meta.is_dir() {
            self.linked.push_back(Link {
                relative,
                target,
                parent: parent.to_path_buf(),
            });
            Ok(())
        } else {
            self.file(&target, &meta, &relative)
        }
    }

    fn linked_directory(&mut self, link: Link) -> Result<()> {
        if link.parent.starts_with(&link.target) {
            return Err(self.refuse(
                &link.relative,
                format!(
                    "is a link to {}, a directory it is in: a loop",
                    link.target.display()
                ),
            ));
        }
        if let Some(already) = self.read.get(&link.target) {
            let already = if already.is_empty() { "." } else { already };
            return Err(self.refuse(
                &link.relative,
                format!(
                    "is a link to {}, which is read already as {already}; its files would be read twice",
                    link.target.display()
                ),
            ));
        }
        self.read.insert(link.target.clone(), link.relative.clone());
        self.directory(&link.target, &link.relative)
    }

    /// A config file at `path` (links resolved), `meta` its metadata as
    /// listed: read if it is a regular file no larger than the limit.
    fn file(&mut self, path: &Path, meta: &Metadata, relative: &str) -> Result<()> {
        if let Err(reason) = check_bundle_path(relative) {
            // Quoted and escaped: the name may hold a newline or a bidi
            // override that would make the error read as something else.
            let name = self.shown.join(relative).display().to_string();
            return Err(Error::invalid(format!("{name:?}"), reason));
        }
        self.check_kind(relative, meta)?;
        let file = open_without_blocking(path).map_err(|e| self.io(relative, e))?;
        // What was opened may not be what was listed (replaced in between).
        let opened = file.metadata().map_err(|e| self.io(relative, e))?;
        self.check_kind(relative, &opened)?;
        let mut bytes = Vec::new();
        file.take(MAX_FILE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| self.io(relative, e))?;
        if bytes.len() as u64 > MAX_FILE_BYTES {
            return Err(self.too_large(relative));
        }
        let text = String::from_utf8(bytes)
            .map_err(|e| self.refuse(relative, format!("is not UTF-8 text: {e}")))?;
        self.files.insert(relative.to_owned(), text);
        Ok(())
    }

    fn check_kind(&self, relative: &str, meta: &Metadata) -> Result<()> {
        if !meta.is_file() {
            return Err(self.refuse(
                relative,
                format!("is {}, not a regular file", kind(&meta.file_type())),
            ));
        }
        if meta.len() > MAX_FILE_BYTES {
            return Err(self.too_large(relative));
        }
        Ok(())
    }

    /// A name that is not UTF-8 cannot be a bundle's path as it is, and
    /// one made UTF-8 would be another file's name.
    fn not_utf8(&self, relative: &str) -> Error {
        let name = self.shown.join(relative).display().to_string();
        Error::invalid(
            format!("{name:?}"),
            "the name is not UTF-8 (shown with U+FFFD); config file and directory names must be",
        )
    }

    fn too_large(&self, relative: &str) -> Error {
        self.refuse(
            relative,
            format!("config files are limited to {MAX_FILE_BYTES} bytes"),
        )
    }

    fn io(&self, relative: &str, source: std::io::Error) -> Error {
        Error::ReadConfig {
            path: self.shown.join(relative).display().to_string(),
            source,
        }
    }
}

/// Whether a file of this name is read as config.
fn is_config_file(name: &OsStr) -> bool {
    let name = name.as_encoded_bytes();
    [&b".yaml"[..], b".yml", b".json"]
        .iter()
        .any(|ext| name.ends_with(ext))
}

/// `relative/name`; a name that is not UTF-8 is kept lossily, for errors.
fn join(relative: &str, name: &OsStr) -> String {
    let name = name.to_string_lossy();
    if relative.is_empty() {
        name.into_owned()
    } else {
        format!("{relative}/{name}")
    }
}

/// Opens `path` for reading without waiting: a FIFO swapped in after its
/// type was checked must not block the open until a writer comes.
fn open_without_blocking(path: &Path) -> std::io::Result<File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // Nor may a terminal swapped in become the controlling one.
        options.custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
    }
    options.open(path)
}

/// What a file that is not a regular file is, for the error.
fn kind(file_type: &FileType) -> &'static str {
    if file_type.is_dir() {
        return "a directory";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if file_type.is_fifo() {
            return "a FIFO";
        }
        if file_type.is_socket() {
            return "a socket";
        }
        if file_type.is_char_device() {
            return "a character device";
        }
        if file_type.is_block_device() {
            return "a block device";
        }
    }
    "a special file"
}
