"""Measuring a running server: replay a trace against it, sweep the L2 ladder, and set each
measurement beside what plan/ predicts for the same requests.

`tiers` predicts hit rates from a trace and `model` fits load times from points a user typed
in; this package measures both on the server the user runs. Its parts:

  tokens     block ids -> token ids, deterministically (one block id, always the same tokens)
  workload   a trace -> the requests a replay sends (scaled, within SGLang's own limits,
             encoded)
  server     what /server_info says: version, pool sizes (L1, L2), page size, limits (bounded)
  client     one streamed /generate over a kept-alive http.client connection, timed, and
             ended by one deadline whatever the server sends (GETs too)
  replay     open loop by the trace's timestamps, or closed loop at a fixed concurrency
  stats      percentiles, hit rates per tier, throughput; failures by reason, validity
  noise      bootstrap intervals over requests, paired between steps (docs/measure.md)
  predict    plan.hitrate's curve of the replayed requests read at the server's capacities,
             and why a measurement can differ from it
  serverproc a server started through `xputune launch sglang` (its own session), stopped;
             signalled only while unreaped, so never a reused pid
  phases     phases in one replay (warm, measure, stress, cool), each in tokens of its own,
             and the last measurement against the first: recovered or not
  sweep      the tier-by-tier experiment: launch, replay, stop; plateau, baseline, fit
  l3store    the L3 store between a sweep's sizes: a new folder per size (file), emptied
             (--clear-l3) or kept (--keep-l3) where it cannot be given one
  analysis   what a sweep says: load and recompute lines, net benefit, knee, plateau, and the
             differences between sizes, each with its interval (noise)
  report     the replay and sweep documents (schemas replay.json and sweep.json)

It sits between launch/ and cli/: it reads the server over HTTP and starts servers through the
launcher's command line (`python -m xputune launch sglang ...`), the launcher's stable
contract, never through launch/'s internals. HTTP is the standard library's (http.client,
one connection per worker thread, kept alive): nothing to install, and start-up stays light.
"""
