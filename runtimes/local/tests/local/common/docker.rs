//! A stand-in for `docker` (and `podman`): a shell script on a PATH of its
//! own that records every call — its arguments and its environment — and
//! plays `docker run` by running the command on this machine, in the
//! directory the container's working directory is mounted from, with the
//! `-e` variables and the container's input and output directories mapped
//! to their mounts. `docker kill` signals the process group of the named
//! "container". An image whose name starts with `missing` is not found, as
//! docker reports it.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

const STAND_IN: &str = r#"#!/bin/sh
state='@STATE@'
engine=$(basename "$0")
printf '%s\0' "$@" > "$state/$engine.$1.$$.argv"
env -0 > "$state/$engine.$1.$$.env"

if [ "$1" = kill ]; then
    shift
    signal=KILL
    while [ $# -gt 1 ]; do
        case "$1" in
            --signal|-s) signal=$2; shift 2 ;;
            *) shift ;;
        esac
    done
    echo "$signal $1" >> "$state/kills"
    pid=$(cat "$state/$1.pid" 2>/dev/null) || {
        echo "Error response from daemon: No such container: $1" >&2
        exit 1
    }
    kill -s "$signal" -- "-$pid" 2>/dev/null
    exit 0
fi
[ "$1" = run ] || { echo "$engine: '$1' is not a command the stand-in knows" >&2; exit 1; }
shift

mounts=''
workdir=/
entrypoint=''
name=''
while [ $# -gt 0 ]; do
    case "$1" in
        --rm) shift ;;
        --name) name=$2; shift 2 ;;
        -v) mounts="$mounts$2
"; shift 2 ;;
        -w) workdir=$2; shift 2 ;;
        -e) case "$2" in
                *=*) export "$2" ;;
                # docker takes the value from its own environment
                *) printenv "$2" > /dev/null || unset "$2" ;;
            esac
            shift 2 ;;
        --entrypoint) entrypoint=$2; shift 2 ;;
        -*) echo "$engine: unknown flag: $1" >&2; exit 125 ;;
        *) break ;;
    esac
done
image=$1
shift
case "$image" in
    missing*)
        printf "Unable to find image '%s' locally\n$engine: Error response from daemon: pull access denied for %s, repository does not exist or may require 'docker login'\n\nRun '$engine run --help' for more information\n" "$image" "${image%%:*}" >&2
        exit 125 ;;
esac

# The path on this machine of a path inside the container.
host() {
    path=$1
    old_ifs=$IFS
    IFS='
'
    for mount in $mounts; do
        src=${mount%%:*}
        rest=${mount#*:}
        dst=${rest%%:*}
        case "$path" in
            "$dst"|"$dst"/*) path=$src${path#"$dst"}; break ;;
        esac
    done
    IFS=$old_ifs
    printf '%s' "$path"
}
[ -n "$VERGENCE_INPUT_DIR" ] && export VERGENCE_INPUT_DIR="$(host "$VERGENCE_INPUT_DIR")"
[ -n "$VERGENCE_OUTPUT_DIR" ] && export VERGENCE_OUTPUT_DIR="$(host "$VERGENCE_OUTPUT_DIR")"
cd "$(host "$workdir")" || exit 125
echo $$ > "$state/$name.pid"
exec "$entrypoint" "$@"
"#;

/// A directory with stand-ins for the engines, and what they recorded.
#[derive(Debug)]
pub struct StandIn {
    dir: tempfile::TempDir,
}

impl StandIn {
    /// Stand-ins named after each of `engines` (`docker`, `podman`).
    pub fn new(engines: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("bin")).unwrap();
        std::fs::create_dir(dir.path().join("state")).unwrap();
        let script = STAND_IN.replace("@STATE@", dir.path().join("state").to_str().unwrap());
        for engine in engines {
            let path = dir.path().join("bin").join(engine);
            std::fs::write(&path, &script).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        Self { dir }
    }

    /// The PATH the runner looks the engine up on.
    pub fn path(&self) -> PathBuf {
        self.dir.path().join("bin")
    }

    fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    /// The arguments of each `engine subcommand` call.
    pub fn calls(&self, engine: &str, subcommand: &str) -> Vec<Vec<String>> {
        self.recorded(engine, subcommand, "argv")
    }

    /// The environment of each `engine subcommand` call, as `NAME=value`.
    pub fn environments(&self, engine: &str, subcommand: &str) -> Vec<Vec<String>> {
        self.recorded(engine, subcommand, "env")
    }

    /// `SIGNAL container` for each `kill`, in order.
    pub fn kills(&self) -> Vec<String> {
        match std::fs::read_to_string(self.state().join("kills")) {
            Ok(kills) => kills.lines().map(str::to_owned).collect(),
            Err(_) => Vec::new(),
        }
    }

    fn recorded(&self, engine: &str, subcommand: &str, what: &str) -> Vec<Vec<String>> {
        let prefix = format!("{engine}.{subcommand}.");
        let suffix = format!(".{what}");
        let mut files: Vec<PathBuf> = std::fs::read_dir(self.state())
            .unwrap()
            .flatten()
            .map(|entry| entry.path())
            .filter(|path| {
                let name = path.file_name().unwrap().to_str().unwrap();
                name.starts_with(&prefix) && name.ends_with(&suffix)
            })
            .collect();
        files.sort();
        files.iter().map(|file| split_nul(file)).collect()
    }
}

fn split_nul(file: &Path) -> Vec<String> {
    let bytes = std::fs::read(file).unwrap();
    bytes
        .split(|b| *b == 0)
        .filter(|part| !part.is_empty())
        .map(|part| String::from_utf8_lossy(part).into_owned())
        .collect()
}
