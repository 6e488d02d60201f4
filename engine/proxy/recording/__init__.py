"""The proxy's recording, off the request path: one exchange as the relay hands it on (``exchange``), the
queue and writer thread (``recorder``), which session a request belongs to (``sessions``), and its rows in the
session database (``writer``, ``record_parts``)."""
