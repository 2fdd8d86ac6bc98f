"""One table of exit statuses for every command: what each number means, said once.

Scripts, cron, systemd and Ansible read the status before the words: the same situation gets
the same number from every command (drift is 1 from check, from a dry-run apply and from
watch alike), and success is 0 whether a command found the host at its profile or put it
there. Each command lists the statuses it can end with (cli/spec.Command.exits); its --help
and its man page's EXIT STATUS section are drawn from this table.
"""

from __future__ import annotations

OK = 0
DIFFERENCE = 1
USAGE = 2
UNSUPPORTED = 3
PERMISSION = 4
LOCKED = 5
JOURNAL = 6
VERIFY = 7
ROLLED_BACK = 8
ROLLBACK_INCOMPLETE = 9
MEASUREMENT = 10
INTERRUPTED = 130
PIPE = 141

MEANINGS: dict[int, str] = {
    OK: "success: done, or the host already is as asked",
    DIFFERENCE: "a difference was found: drift from the profile, changes a dry run would "
    "make, findings of a report, a failed self-test, a rank's KV pool off its plan",
    USAGE: "usage error or bad input: an option, a value, a file or a recording that cannot "
    "be used (one line says which)",
    UNSUPPORTED: "this host lacks what the command needs (a card, a toolkit, a compiler, a "
    "kernel feature)",
    PERMISSION: "a permission is missing: root, or the kernel's lockdown refuses the change",
    LOCKED: "another xputune apply, rollback or watch holds the state lock",
    JOURNAL: "the journal is unreadable, or an earlier apply was interrupted: run `xputune "
    "rollback`",
    VERIFY: "a value read back differs from the one written: the change did not take",
    ROLLED_BACK: "a step failed; everything already changed was rolled back",
    ROLLBACK_INCOMPLETE: "some original values could not be restored; the journal is kept so "
    "rollback can be retried",
    MEASUREMENT: "the run did not measure what it says: requests failed beyond the threshold "
    "(--min-completion), or none completed; the result says how many and why",
    INTERRUPTED: "interrupted (Ctrl-C); what was changed is rolled back",
    PIPE: "the output pipe closed early",
}

#: What every command can end with, beside its own statuses.
ALWAYS = (OK, USAGE, INTERRUPTED, PIPE)
#: A command that changes the host (apply, rollback, watch).
CHANGES = (DIFFERENCE, PERMISSION, LOCKED, JOURNAL, VERIFY, ROLLED_BACK, ROLLBACK_INCOMPLETE)


def statuses(own: tuple[int, ...]) -> list[tuple[int, str]]:
    """(code, meaning) of a command's statuses, in order."""
    return [(code, MEANINGS[code]) for code in sorted({*ALWAYS, *own})]
