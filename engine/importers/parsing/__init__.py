"""What every format's parse uses, apart from the import pipeline that runs it.

:mod:`~engine.importers.parsing.parsed` holds the shapes a parse yields (:class:`ParsedSession`,
its messages and model calls) and what an import returns; :mod:`~engine.importers.parsing.readers`
reads provider-shaped pieces (content blocks, messages, usage) into canonical ones. A format
module calls these and returns; the pipeline (:mod:`engine.importers.api`, the writer) reads the
shapes after the format has returned, so the walk from a file to its rows never comes back here
while a format is running.
"""
