"""``python -m engine.explain --schema``: print the JSON schema of ``ctxdesk why --format json``."""

import sys

from engine.explain.json_shape import schema_text

if __name__ == "__main__":
    if sys.argv[1:] != ["--schema"]:
        sys.exit("usage: python -m engine.explain --schema > docs/why.schema.json")
    sys.stdout.write(schema_text())
