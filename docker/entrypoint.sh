#!/bin/bash
# kmon's container entry point. Spark on Kubernetes starts executor pods (and the Spark
# operator the driver pod) with the first argument `executor` or `driver`, and the settings in
# SPARK_* environment variables, as Spark's own images' entrypoint.sh expects; everything else
# is a `kmon` command line (`probe`, `monitor`, ...).
set -euo pipefail

case "${1:-}" in
  executor)
    shift
    # Spark passes the executors' JVM options as SPARK_JAVA_OPT_0, SPARK_JAVA_OPT_1, ...
    mapfile -t java_opts < <(env | grep '^SPARK_JAVA_OPT_' | sort -t_ -k4 -n | sed 's/[^=]*=//')
    exec "${JAVA_HOME}/bin/java" "${java_opts[@]}" \
      -Xms"${SPARK_EXECUTOR_MEMORY}" -Xmx"${SPARK_EXECUTOR_MEMORY}" \
      -cp "${SPARK_HOME}/jars/*${SPARK_CLASSPATH:+:${SPARK_CLASSPATH}}" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "${SPARK_DRIVER_URL}" \
      --executor-id "${SPARK_EXECUTOR_ID}" \
      --cores "${SPARK_EXECUTOR_CORES}" \
      --app-id "${SPARK_APPLICATION_ID}" \
      --hostname "${SPARK_EXECUTOR_POD_IP}" \
      --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID}" \
      --podName "${SPARK_EXECUTOR_POD_NAME}"
    ;;
  driver)
    shift
    exec "${SPARK_HOME}/bin/spark-submit" \
      --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS}" \
      --conf "spark.executorEnv.SPARK_DRIVER_POD_IP=${SPARK_DRIVER_BIND_ADDRESS}" \
      --deploy-mode client \
      "$@"
    ;;
  *)
    exec kmon "$@"
    ;;
esac
