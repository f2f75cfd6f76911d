"""The verdict of `make test`: each named sub-run judged on its own, then the total.

usage: python infra/local/test_summary.py CACHE_DIR RUN [RUN ...]

Each RUN left `CACHE_DIR/test-RUN.log` (nextest's output) and `CACHE_DIR/test-RUN.status`
(the exit status of its pipeline). A run fails when its status file is missing or not 0,
when its log has no nextest `Summary [` line (a test binary that did not link or list,
a server that did not start), or when its summary counts any failed, timed-out or
exec-failed test. Skips the run allowed (UMPIRE_ALLOWED_SKIPS, set by `make test` only
where a tool is known missing) are written by the tests to `CACHE_DIR/test-skips.txt`
and listed here, with the figures tests measured (`CACHE_DIR/test-measures.txt`). The last line is the plain total, `N passed, M failed`; the exit status
is non-zero unless every run passed and at least one test ran.
"""
import os
import re
import sys

# nextest's counts: "12 passed", "1 failed", "2 timed out", "1 exec failed"; also
# "(1 slow)", "3 skipped", "1 leaky" and "1 flaky", which are not failures.
COUNT = re.compile(r"(\d+) (passed|failed|timed out|exec failed|skipped)")


def judge(cache, run):
    """(passed, failed, problems) of one sub-run."""
    problems = []
    log_path = os.path.join(cache, f"test-{run}.log")
    status_path = os.path.join(cache, f"test-{run}.status")
    try:
        log = open(log_path, encoding="utf-8", errors="replace").read()
    except OSError:
        return 0, 0, [f"{run}: no log ({log_path})"]
    try:
        status = open(status_path).read().strip()
    except OSError:
        status = None
    summaries = [l for l in log.splitlines() if re.match(r"^\s*Summary \[", l)]
    passed = failed = 0
    if not summaries:
        problems.append(f"{run}: no nextest summary (a test binary did not build or list, or the run did not start)")
    else:
        line = summaries[-1]
        # Each count is read with all its words: "1 exec failed" once, not as "failed".
        for n, what in COUNT.findall(line):
            n = int(n)
            if what == "passed":
                passed += n
            elif what in ("failed", "timed out", "exec failed"):
                failed += n
                problems.append(f"{run}: {n} {what}")
        if len(summaries) > 1:
            problems.append(f"{run}: {len(summaries)} summaries in one run")
    if status is None:
        problems.append(f"{run}: no exit status recorded")
    elif status != "0" and not failed:
        problems.append(f"{run}: exited {status} with no failed test counted")
    return passed, failed, problems


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    cache, runs = argv[1], argv[2:]
    total_passed = total_failed = 0
    all_problems = []
    skips = []
    for run in runs:
        passed, failed, problems = judge(cache, run)
        print(f"{run}: {passed} passed, {failed} failed" + ("" if not problems else " (" + "; ".join(problems) + ")"))
        total_passed += passed
        # A run that broke without counting a failure still fails the whole.
        total_failed += failed or (1 if problems else 0)
        all_problems += problems
    try:
        skips = sorted(set(open(os.path.join(cache, "test-skips.txt")).read().splitlines()))
    except OSError:
        pass
    for s in skips:
        print(s)
    try:
        for line in open(os.path.join(cache, "test-measures.txt")).read().splitlines():
            print(line)
    except OSError:
        pass
    print(f"{total_passed} passed, {total_failed} failed")
    return 0 if total_failed == 0 and total_passed > 0 and not all_problems else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
