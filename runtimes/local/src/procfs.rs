//! What Linux's /proc says about processes, for the process groups of jobs
//! and for the processes a job left behind. Every reader returns `None`
//! where /proc is not there or the process is gone: callers decide what
//! "cannot tell" means for them.

/// The fields of `/proc/<pid>/stat` Vergence reads.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Stat {
    /// R, S, D, Z (zombie), X (dead), …
    pub(crate) state: char,
    pub(crate) group: i32,
    /// When the process started, in clock ticks since boot: a pid reused by
    /// a later process has another.
    pub(crate) start: Option<u64>,
}

impl Stat {
    pub(crate) fn of(pid: i32) -> Option<Self> {
        Self::parse(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
    }

    /// The command name comes in parentheses and may itself contain spaces
    /// or parentheses, so fields are counted from the last ')'.
    pub(crate) fn parse(stat: &str) -> Option<Self> {
        let after_name = &stat[stat.rfind(')')? + 1..];
        // The fields after the name start at field 3 (state).
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        Some(Self {
            state: fields.first()?.chars().next()?,
            group: fields.get(5 - 3)?.parse().ok()?,
            start: fields.get(22 - 3).and_then(|s| s.parse().ok()),
        })
    }

    /// Neither a zombie nor dead: a process that still runs.
    pub(crate) fn is_live(&self) -> bool {
        !matches!(self.state, 'Z' | 'X')
    }
}

/// The pids /proc lists; `None` without a readable /proc.
pub(crate) fn pids() -> Option<impl Iterator<Item = i32>> {
    let entries = std::fs::read_dir("/proc").ok()?;
    Some(
        entries
            .flatten()
            .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_state_and_group_even_with_odd_command_names() {
        let stat = "4242 (my (odd) cmd) S 1 4240 4240 0 -1 4194560 108 0 0 0";
        let parsed = Stat::parse(stat).unwrap();
        assert_eq!((parsed.state, parsed.group), ('S', 4240));
        assert_eq!(Stat::parse("garbage"), None);
    }

    #[test]
    fn reads_the_start_time_of_this_process() {
        let me = Stat::of(i32::try_from(std::process::id()).unwrap()).unwrap();
        assert!(me.is_live());
        assert!(me.start.is_some());
    }
}
