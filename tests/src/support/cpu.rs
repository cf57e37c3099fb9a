//! CPU time of processes, read from `/proc` (Linux): what a router spent for a run, to set
//! against the requests it served.
//!
//! A process's time is its own user and system time plus that of its children it has
//! waited for (`/proc/<pid>/stat` fields 14-17, in clock ticks of 1/100 s, the fixed
//! `USER_HZ` of Linux's `/proc`). A process group's is the sum over every process still in
//! the group (a peer launched through a Python wrapper runs its router as a child).

use std::path::Path;

/// Clock ticks per second of `/proc/<pid>/stat` (Linux's `USER_HZ`).
const TICKS_PER_SECOND: f64 = 100.0;

/// The CPU seconds `pid` and its reaped children used so far; `None` when it is gone or
/// `/proc` cannot be read.
pub fn process_seconds(pid: u32) -> Option<f64> {
    stat(&Path::new("/proc").join(pid.to_string()).join("stat")).map(|s| s.seconds)
}

/// The CPU seconds of every process whose process group is `pgid`.
pub fn group_seconds(pgid: u32) -> f64 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    entries
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter_map(|e| stat(&e.path().join("stat")))
        .filter(|s| s.pgrp == pgid)
        .map(|s| s.seconds)
        .sum()
}

/// The fields of one `/proc/<pid>/stat` this module reads.
struct Stat {
    pgrp: u32,
    seconds: f64,
}

fn stat(path: &Path) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(path).ok()?)
}

/// `pid (comm) state ppid pgrp ... utime stime cutime cstime ...`: the command may hold
/// spaces and parentheses, so fields are counted after its last `)`.
fn parse_stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the command: state (3), ppid (4), pgrp (5), ..., utime (14) .. cstime (17).
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
    let ticks = field(14)? + field(15)? + field(16)? + field(17)?;
    Some(Stat {
        pgrp: u32::try_from(field(5)?).ok()?,
        seconds: ticks as f64 / TICKS_PER_SECOND,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_gives_its_group_and_its_time_with_its_waited_for_children() {
        let line = "4242 (a (weird) name) S 1 4240 4240 0 -1 4194560 100 0 0 0 \
                    250 50 7 3 20 0 1 0 100 0 0";
        let stat = parse_stat(line).expect("parses");
        assert_eq!(stat.pgrp, 4240);
        assert!((stat.seconds - 3.1).abs() < 1e-9, "{}", stat.seconds);
        assert!(parse_stat("garbage").is_none());
    }

    #[test]
    fn this_process_has_spent_some_time() {
        let me = process_seconds(std::process::id()).expect("this process");
        assert!(me >= 0.0);
        assert!(process_seconds(u32::MAX).is_none());
    }
}
