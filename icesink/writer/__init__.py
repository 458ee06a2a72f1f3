"""Code that runs on Spark executors: pyarrow only, never SQLAlchemy or a catalog."""
