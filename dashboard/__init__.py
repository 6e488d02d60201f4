"""ctxdesk dashboard: a Streamlit app (app.py, views/) over session databases read through DuckDB (data/)."""
