use std::process::Command;

fn run(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_overworld-reference"))
        .args(args)
        .output()
        .expect("run binary")
}

#[test]
fn bad_arguments_exit_2() {
    for args in [
        &["--entities", "10"][..],
        &["--entities", "10", "--ticks", "x"],
        &["--entities", "0", "--ticks", "1"],
        &["--entities", "10", "--ticks", "1", "--bogus"],
        &["--entities", "10", "--ticks", "1", "--rate", "0"],
        &["--entities", "10", "--ticks", "1", "--threads"],
    ] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(!out.stderr.is_empty());
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn prints_one_json_line() {
    let out = run(&[
        "--entities",
        "200",
        "--ticks",
        "5",
        "--warmup",
        "2",
        "--threads",
        "2",
    ]);
    assert!(out.status.success());
    let s = String::from_utf8(out.stdout).unwrap();
    assert_eq!(s.lines().count(), 1);
    for key in [
        "entities", "threads", "rate", "seed", "warmup", "ticks", "avg_us", "p50_us", "p99_us",
        "p999_us", "max_us", "checksum",
    ] {
        assert!(s.contains(&format!("\"{key}\":")), "missing {key} in {s}");
    }
    let one = run(&["--entities", "200", "--ticks", "7"]);
    let cs = |s: &str| {
        s.split("\"checksum\":")
            .nth(1)
            .unwrap()
            .trim()
            .trim_end_matches('}')
            .to_string()
    };
    assert_eq!(cs(&s), cs(&String::from_utf8(one.stdout).unwrap()));
}
