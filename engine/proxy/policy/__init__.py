"""The proxy's in-flight policies: what the settings file turns on (``policy_file``), the per-request decision
(``controller``) over the engine's own clearing, offloading, compaction and guard (``policies``,
``compaction_policy``, ``read_result``), a live session's manual compaction (``live``), and the decisions as
values (``edits``)."""
