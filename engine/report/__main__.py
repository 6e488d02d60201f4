"""``python -m engine.report --schema`` writes the report's JSON Schema (docs/report.schema.json)."""

import sys

from engine.report.shapes import schema_text

if sys.argv[1:] == ["--schema"]:
    sys.stdout.write(schema_text())
else:
    sys.exit("usage: python -m engine.report --schema")
