"""`llmd tune`: the seeds' tuning method as a command. For each engine setting it boots the
engine alone, runs the `llmd bench` load, records latency, throughput, KV and GPU memory with
a verdict, and recommends the engine args.

May import: bench, admin, releases, telemetry, supervisor, sizing, gpu, runtime, arguments,
config, engine.
"""
