//! Fuzzes the config directory reader (`vergence_compiler::read_dir_with`,
//! what every command reading `--config` goes through) over odd file
//! types: the input builds a small directory of regular files with fuzzed
//! contents, links inside and out of it, link loops, FIFOs, sockets,
//! links to devices and directories where files are expected. The reader
//! must return (ok or an error) without blocking or reading without
//! bound (libFuzzer's -timeout and -rss_limit_mb make either a failure),
//! and what it returns holds only regular files from inside the directory
//! (from outside too with `allow_external_links`), each under the size
//! limit, at paths an API accepts.

#![no_main]

use std::io::Write;
use std::os::unix::fs::symlink;
use std::os::unix::net::UnixListener;
use std::path::Path;

use libfuzzer_sys::fuzz_target;
use nix::sys::stat::Mode;
use vergence_compiler::{ReadOptions, read_dir_with};
use vergence_model::check_bundle_path;

/// Where entries are made, relative to the config directory.
const NAMES: &[&str] = &[
    "a.yaml",
    "b.yml",
    "c.json",
    "notes.txt",
    "sub",
    "sub/d.yaml",
    "sub/inner",
    "sub/inner/e.yaml",
    ".hidden",
    ".hidden/f.yaml",
    "g.yaml",
    "sub/h.yml",
];

/// What links inside the directory point at, relative to the link.
const INSIDE: &[&str] = &[
    ".",
    "..",
    "sub",
    "a.yaml",
    "sub/d.yaml",
    "../a.yaml",
    ".hidden",
    "nowhere.yaml",
    "sub/inner",
    "g.yaml",
];

/// Devices a link may point at: every one is refused.
const DEVICES: &[&str] = &["/dev/zero", "/dev/null", "/dev/urandom"];

const MAX_FILE_BYTES: usize = 1024 * 1024;

fuzz_target!(|data: &[u8]| {
    let Some((&flags, mut rest)) = data.split_first() else {
        return;
    };
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir(outside.path().join("dir")).unwrap();
    // The outside files hold their directory's (random) name, which no
    // input can write into a file of its own.
    let marker = format!("# outside {}\n", outside.path().display());
    for file in ["o.yaml", "dir/p.yaml"] {
        std::fs::write(outside.path().join(file), &marker).unwrap();
    }
    let config = tempfile::tempdir().unwrap();
    let root = config.path();
    // Sockets exist while their listener does.
    let mut listeners = Vec::new();
    while let [op, name, arg, tail @ ..] = rest {
        rest = tail;
        let path = root.join(NAMES[usize::from(*name) % NAMES.len()]);
        if let Some(parent) = path.parent() {
            if std::fs::create_dir_all(parent).is_err() {
                continue;
            }
        }
        // Each may fail (the name is taken): the directory is what it is.
        match op % 8 {
            0 => {
                let len = usize::from(*arg).min(rest.len());
                let (contents, tail) = rest.split_at(len);
                rest = tail;
                // Only a new file: writing to a FIFO made before would
                // block this harness, not the reader under test.
                if let Ok(mut file) = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&path)
                {
                    let _ = file.write_all(contents);
                }
            }
            1 => {
                let _ = symlink(INSIDE[usize::from(*arg) % INSIDE.len()], &path);
            }
            2 => {
                let target = ["", "o.yaml", "dir", "dir/p.yaml"][usize::from(*arg) % 4];
                let _ = symlink(outside.path().join(target), &path);
            }
            3 => {
                let _ = symlink(DEVICES[usize::from(*arg) % DEVICES.len()], &path);
            }
            4 => {
                let _ = nix::unistd::mkfifo(&path, Mode::S_IRUSR | Mode::S_IWUSR);
            }
            5 => {
                let _ = std::fs::create_dir(&path);
            }
            6 => {
                if let Ok(listener) = UnixListener::bind(&path) {
                    listeners.push(listener);
                }
            }
            _ => {
                // A link to itself, or to a directory it is in.
                let target = if arg % 2 == 0 {
                    path.clone()
                } else {
                    root.to_path_buf()
                };
                let _ = symlink(target, &path);
            }
        }
    }
    let options = ReadOptions {
        allow_external_links: flags % 2 == 1,
    };
    if let Ok(bundle) = read_dir_with(root, options) {
        check(&bundle.files, options, root, &marker);
    }
});

fn check(
    files: &std::collections::BTreeMap<String, String>,
    options: ReadOptions,
    root: &Path,
    marker: &str,
) {
    assert!(!files.is_empty(), "an empty bundle was returned");
    for (path, text) in files {
        assert_eq!(check_bundle_path(path), Ok(()), "{path:?}");
        assert!(text.len() <= MAX_FILE_BYTES, "{path}: {} bytes", text.len());
        assert!(
            options.allow_external_links || text != marker,
            "{path} was read from outside {} without allow_external_links",
            root.display()
        );
    }
}
