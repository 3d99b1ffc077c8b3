//! Which words of a job's command name files of the config directory,
//! read from the command as written. The CLI (with the directory at hand)
//! and the API (with only the pushed YAML and JSON files) read the same
//! words, so both find the same ones: whether a script exists is not
//! asked, since the API cannot see it.
//!
//! A word names a file of the config directory when it is
//! - the program as a relative path with a `/` (`./deploy.sh`,
//!   `scripts/deploy.sh`): the local runner resolves such a program
//!   against the job's working directory (a bare name is looked up on
//!   PATH, an absolute path is where it says);
//! - the script of a shell or interpreter (`sh deploy.sh`, `bash -eu
//!   scripts/check.sh`, `python3 tools/check.py`): its first argument after
//!   its options, unless absolute, or an option gives the program inline or
//!   from elsewhere (`sh -c`, `sh -s`, `python -c`, `python -m`, `node -e`,
//!   `ruby -e`, `perl -e`);
//! - an argument, or the value of one written `NAME=VALUE`
//!   (`--file=./x`), that starts with `./` or `../`, or that is the path of
//!   one of the config's own files or of a directory holding some, from
//!   the working directory (`kubectl apply -f k8s/web.yaml`);
//! - such a word inside the script a shell is given with `-c` (`sh -c
//!   './deploy.sh "$IMAGE"'`), split at blanks and shell operators.
//!
//! A word that starts with a template (`{{.Params.script}}`) is not
//! judged: what it names is known only when the job runs.

use std::collections::BTreeMap;

use crate::config::{is_inside, resolve_in};

/// A word of a command that names a file of the config directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct NamedFile {
    /// The entry of `cmd` it is in.
    pub(super) index: usize,
    /// The word as written.
    pub(super) word: String,
}

/// The words of `cmd`, run in `dir` (relative to the config root), that
/// name files of the config directory; `files` are the config's own.
pub(super) fn config_files_named(
    cmd: &[String],
    dir: &str,
    files: &BTreeMap<String, String>,
) -> Vec<NamedFile> {
    let Some(program) = cmd.first() else {
        return Vec::new();
    };
    let script = Interpreter::of(program).and_then(|i| i.script(cmd));
    let mut named = Vec::new();
    if program.contains('/') && is_relative(program) {
        named.push(NamedFile {
            index: 0,
            word: program.clone(),
        });
    }
    for (index, arg) in cmd.iter().enumerate().skip(1) {
        let word = match script {
            Some(Script::File(at)) if at == index && is_relative(arg) => Some(arg.as_str()),
            Some(Script::ShellText(at)) if at == index => shell_words(arg)
                .into_iter()
                .find(|w| names_config_path(w, dir, files)),
            _ => value_candidates(arg).find(|w| names_config_path(w, dir, files)),
        };
        if let Some(word) = word {
            named.push(NamedFile {
                index,
                word: word.to_owned(),
            });
        }
    }
    named
}

/// Not absolute and not a template: a path the runner would resolve
/// against the working directory. `-` is standard input.
fn is_relative(word: &str) -> bool {
    !word.is_empty() && !word.starts_with('/') && !word.starts_with("{{") && word != "-"
}

/// An argument and, when it is written `NAME=VALUE`, its value.
fn value_candidates(arg: &str) -> impl Iterator<Item = &str> {
    std::iter::once(arg).chain(arg.split_once('=').map(|(_, value)| value))
}

/// `./x` and `../x`, or the path of a file of the config (or of a
/// directory holding some, when written with a `/`) from `dir`.
fn names_config_path(word: &str, dir: &str, files: &BTreeMap<String, String>) -> bool {
    if word.starts_with("{{") {
        return false;
    }
    if word.starts_with("./") || word.starts_with("../") {
        return true;
    }
    if word.contains("{{") || word.contains("://") {
        return false;
    }
    let Some(path) = resolve_in(dir, word).filter(|p| !p.is_empty()) else {
        return false;
    };
    files.contains_key(&path)
        || (word.contains('/') && files.keys().any(|file| is_inside(file, &path)))
}

/// The words of a shell script, split at blanks and shell operators, with
/// their quotes removed, and the values of its `NAME=VALUE` words.
fn shell_words(text: &str) -> Vec<&str> {
    text.split(|c: char| c.is_whitespace() || ";&|()<>`".contains(c))
        .map(|w| w.trim_matches(['"', '\'']))
        .filter(|w| !w.is_empty())
        .flat_map(value_candidates)
        .collect()
}

/// Where an interpreter's program comes from, by the index in `cmd` of
/// the argument that holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Script {
    /// A file: the path is this argument.
    File(usize),
    /// A shell's `-c`: this argument is the script's text.
    ShellText(usize),
}

/// A program whose first argument after its options is a script file,
/// with the options that change that.
struct Interpreter {
    /// Short options after which the first argument is the script's text.
    text: &'static str,
    /// Short options after which no argument is a script file: the
    /// program is given inline, as a module, or on standard input.
    no_file: &'static str,
    /// Short options whose value follows: the rest of the cluster, or
    /// the next argument.
    valued: &'static str,
    /// Long options that give the program inline.
    long_no_file: &'static [&'static str],
    /// Long options whose value is the next argument (unless written
    /// with `=`).
    long_valued: &'static [&'static str],
    /// Whether `+` starts options too (`set +e` as `sh +e`).
    plus: bool,
}

const SHELL: Interpreter = Interpreter {
    text: "c",
    no_file: "s",
    valued: "oO",
    long_no_file: &[],
    long_valued: &["--rcfile", "--init-file"],
    plus: true,
};

const PYTHON: Interpreter = Interpreter {
    text: "",
    no_file: "cm",
    valued: "cmWX",
    long_no_file: &[],
    long_valued: &[],
    plus: false,
};

const NODE: Interpreter = Interpreter {
    text: "",
    no_file: "ep",
    valued: "eprC",
    long_no_file: &["--eval", "--print"],
    long_valued: &[
        "--eval",
        "--print",
        "--require",
        "--import",
        "--loader",
        "--experimental-loader",
        "--conditions",
        "--title",
    ],
    plus: false,
};

const RUBY: Interpreter = Interpreter {
    text: "",
    no_file: "e",
    valued: "eICE",
    long_no_file: &[],
    long_valued: &[],
    plus: false,
};

const PERL: Interpreter = Interpreter {
    text: "",
    no_file: "eE",
    valued: "eEIM",
    long_no_file: &[],
    long_valued: &[],
    plus: false,
};

impl Interpreter {
    /// The interpreter a program is, by its name (`sh`, `/bin/bash`,
    /// `python3.12`).
    fn of(program: &str) -> Option<&'static Interpreter> {
        let name = program.rsplit('/').next().unwrap_or(program);
        let python_version = name
            .strip_prefix("python")
            .is_some_and(|v| v.chars().all(|c| c.is_ascii_digit() || c == '.'));
        match name {
            "sh" | "bash" | "dash" | "zsh" | "ksh" | "mksh" | "ash" => Some(&SHELL),
            "node" | "nodejs" => Some(&NODE),
            "ruby" => Some(&RUBY),
            "perl" => Some(&PERL),
            _ if python_version => Some(&PYTHON),
            _ => None,
        }
    }

    /// Where the program of `cmd` (this interpreter and its arguments)
    /// comes from; `None` when from no argument (inline as an option's
    /// value, a module, standard input) or there is none.
    fn script(&self, cmd: &[String]) -> Option<Script> {
        let mut text = false;
        let mut no_file = false;
        let mut index = 1;
        while let Some(arg) = cmd.get(index) {
            index += 1;
            if arg == "--" {
                break;
            }
            if arg == "-" {
                return None;
            }
            if let Some(long) = arg.strip_prefix("--") {
                let (name, value) = long
                    .split_once('=')
                    .map_or((long, None), |(n, v)| (n, Some(v)));
                let name = format!("--{name}");
                no_file |= self.long_no_file.contains(&name.as_str());
                if value.is_none() && self.long_valued.contains(&name.as_str()) {
                    index += 1;
                }
                continue;
            }
            let Some(cluster) = arg
                .strip_prefix('-')
                .or_else(|| arg.strip_prefix('+').filter(|_| self.plus))
                .filter(|c| !c.is_empty())
            else {
                index -= 1;
                break;
            };
            for (at, letter) in cluster.char_indices() {
                text |= self.text.contains(letter);
                no_file |= self.no_file.contains(letter);
                if self.valued.contains(letter) {
                    if at + letter.len_utf8() == cluster.len() {
                        index += 1;
                    }
                    break;
                }
            }
        }
        if index >= cmd.len() {
            return None;
        }
        match (text, no_file) {
            (true, _) => Some(Script::ShellText(index)),
            (false, true) => None,
            (false, false) => Some(Script::File(index)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(cmd: &[&str], dir: &str, files: &[&str]) -> Vec<(usize, String)> {
        let cmd: Vec<String> = cmd.iter().map(|s| (*s).to_owned()).collect();
        let files = files
            .iter()
            .map(|f| ((*f).to_owned(), String::new()))
            .collect();
        config_files_named(&cmd, dir, &files)
            .into_iter()
            .map(|n| (n.index, n.word))
            .collect()
    }

    fn one(index: usize, word: &str) -> Vec<(usize, String)> {
        vec![(index, word.to_owned())]
    }

    #[test]
    fn a_program_with_a_relative_path_is_a_file_of_the_config() {
        assert_eq!(named(&["./deploy.sh", "x"], "", &[]), one(0, "./deploy.sh"));
        assert_eq!(
            named(&["scripts/deploy.sh"], "", &[]),
            one(0, "scripts/deploy.sh")
        );
        assert_eq!(named(&["../bin/tool"], "infra", &[]), one(0, "../bin/tool"));
    }

    #[test]
    fn programs_on_path_absolute_paths_and_templates_are_not() {
        assert_eq!(named(&["curl", "-fsS", "https://x/y"], "", &[]), vec![]);
        assert_eq!(named(&["/usr/bin/curl"], "", &[]), vec![]);
        assert_eq!(named(&["{{.Params.tool}}/run"], "", &[]), vec![]);
        assert_eq!(
            named(&["kubectl", "rollout", "status", "deployment/web"], "", &[]),
            vec![]
        );
        assert_eq!(
            named(&["docker", "push", "ghcr.io/acme/web:1"], "", &[]),
            vec![]
        );
    }

    #[test]
    fn an_interpreters_script_is_a_file_of_the_config() {
        assert_eq!(named(&["sh", "deploy.sh"], "", &[]), one(1, "deploy.sh"));
        assert_eq!(
            named(&["/bin/bash", "-eu", "scripts/check.sh"], "", &[]),
            one(2, "scripts/check.sh")
        );
        assert_eq!(
            named(&["bash", "-euo", "pipefail", "run.sh", "a"], "", &[]),
            one(3, "run.sh")
        );
        assert_eq!(
            named(&["sh", "+e", "-o", "errexit", "x.sh"], "", &[]),
            one(4, "x.sh")
        );
        assert_eq!(
            named(&["python3", "-u", "tools/check.py"], "", &[]),
            one(2, "tools/check.py")
        );
        assert_eq!(
            named(&["python3.12", "-W", "ignore", "check.py"], "", &[]),
            one(3, "check.py")
        );
        assert_eq!(
            named(&["node", "--require", "dotenv/config", "app.js"], "", &[]),
            one(3, "app.js")
        );
        assert_eq!(named(&["ruby", "deploy.rb"], "", &[]), one(1, "deploy.rb"));
        assert_eq!(
            named(&["perl", "-w", "deploy.pl"], "", &[]),
            one(2, "deploy.pl")
        );
        assert_eq!(named(&["sh", "--", "x.sh"], "", &[]), one(2, "x.sh"));
    }

    #[test]
    fn inline_programs_and_absolute_scripts_are_not() {
        assert_eq!(
            named(&["sh", "-c", "curl -fsS https://x/y > out"], "", &[]),
            vec![]
        );
        assert_eq!(
            named(&["bash", "-ec", "echo $VERGENCE_OUTPUT_DIR/plan"], "", &[]),
            vec![]
        );
        assert_eq!(named(&["sh", "/opt/deploy.sh"], "", &[]), vec![]);
        assert_eq!(named(&["sh", "-s", "arg"], "", &[]), vec![]);
        assert_eq!(named(&["sh", "-", "arg"], "", &[]), vec![]);
        assert_eq!(named(&["sh"], "", &[]), vec![]);
        assert_eq!(
            named(&["python3", "-c", "print(1)", "arg"], "", &[]),
            vec![]
        );
        assert_eq!(named(&["python3", "-m", "http.server"], "", &[]), vec![]);
        assert_eq!(named(&["node", "-e", "console.log(1)"], "", &[]), vec![]);
        assert_eq!(named(&["node", "--eval=1", "x"], "", &[]), vec![]);
        assert_eq!(named(&["perl", "-ne", "print", "input"], "", &[]), vec![]);
        assert_eq!(named(&["sh", "{{.Params.script}}"], "", &[]), vec![]);
    }

    #[test]
    fn a_shells_inline_script_is_judged_by_its_words() {
        let cmd = ["sh", "-c", "./deploy.sh \"$IMAGE\" && echo done"];
        assert_eq!(named(&cmd, "", &[]), one(2, "./deploy.sh"));
        let cmd = ["bash", "-euc", "cd ../infra; make"];
        assert_eq!(named(&cmd, "ops", &[]), one(2, "../infra"));
        let cmd = ["sh", "-c", "kubectl apply -f 'k8s/web.yaml'"];
        assert_eq!(named(&cmd, "", &["k8s/web.yaml"]), one(2, "k8s/web.yaml"));
    }

    #[test]
    fn arguments_starting_with_dot_slash_or_naming_config_files_are_files() {
        let cmd = ["kubectl", "apply", "-f", "./k8s"];
        assert_eq!(named(&cmd, "", &[]), one(3, "./k8s"));
        assert_eq!(
            named(&["tool", "--config=../x.toml"], "", &[]),
            one(1, "../x.toml")
        );
        let files = ["infra/k8s/web.yaml"];
        assert_eq!(
            named(&["kubectl", "apply", "-f", "k8s/web.yaml"], "infra", &files),
            one(3, "k8s/web.yaml")
        );
        assert_eq!(
            named(&["kubectl", "apply", "-k", "k8s/"], "infra", &files),
            one(3, "k8s/")
        );
        // A bare word is a directory only by chance: `deployment web`.
        assert_eq!(
            named(&["kubectl", "rollout", "restart", "k8s"], "infra", &files),
            vec![]
        );
        assert_eq!(
            named(&["kubectl", "apply", "-f", "k8s/web.yaml"], "", &files),
            vec![]
        );
    }
}
