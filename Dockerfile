# One image for every icesink role in docker-compose.yml: the Spark master and worker (whose
# Python workers import icesink's writer), the streaming job's driver, the committer daemon
# and the one-shot `icesink db upgrade`.
FROM python:3.11-slim-bookworm

# Spark 4 runs on Java 17; procps gives Spark's scripts `ps`.
RUN apt-get update \
    && apt-get install --yes --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/icesink
COPY pyproject.toml README.md ./
COPY icesink ./icesink
COPY examples ./examples
RUN pip install --no-cache-dir '.[all]'

# Executors must run the interpreter that has icesink and pyarrow installed.
ENV PYSPARK_PYTHON=/usr/local/bin/python \
    PYSPARK_DRIVER_PYTHON=/usr/local/bin/python \
    SPARK_HOME=/usr/local/lib/python3.11/site-packages/pyspark \
    PATH=/usr/local/lib/python3.11/site-packages/pyspark/bin:$PATH

CMD ["icesink", "--help"]
