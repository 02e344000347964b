"""The plumbing of stoker's helper processes: messages (:mod:`.messages`), shared memory slots
(:mod:`.slots`), and starting and stopping helpers (:mod:`.processes`). See README.md here.

Nothing is imported here: the helpers that start without stoker load these modules by path,
and the pipeline's modules import the one they need.
"""
