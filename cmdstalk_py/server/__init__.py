"""The bundled beanstalkd-compatible queue server."""
