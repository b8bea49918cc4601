FROM python:3.11-slim
WORKDIR /app
COPY . /app
RUN pip install --no-cache-dir . && useradd --system purgekeeper && mkdir -p /var/lib/purgekeeper \
    && chown purgekeeper /var/lib/purgekeeper
USER purgekeeper
