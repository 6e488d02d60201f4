"""The proxy's transport: the agents' port (``relay``, with ``admission``, ``http1``, ``connections``,
``streams``, ``websocket``), what the relay hands on (``handoff`` to the Starlette ``app``), the proxy's own
answers (``answers``), a request's way through the policies (``policy_step``, ``read_rounds``) and running it
all (``server``)."""
