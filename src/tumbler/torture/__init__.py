"""The fault-injection harness: ``tumbler torture`` (see docs/torture.md).

Worker processes (:mod:`.worker`) take one lock through the public API and do a
read-modify-write on a counter kept by a separate process that checks fencing tokens
(:mod:`.resource`); a nemesis (:mod:`.faults`) kills and pauses holders, kills and restarts
servers and breaks the network through a proxy (:mod:`.proxy`); everything is recorded
(:mod:`.history`) and checked afterwards (:mod:`.check`). :mod:`.backends` is the table of
backends (how to start their servers, which faults apply, what each promises), :mod:`.harness`
runs the rounds, :mod:`.report` prints and writes the results, :mod:`.cli` is the command.
"""
