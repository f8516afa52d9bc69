"""Request headers the service tests send."""

#: Ask for the work as a background job (RFC 7240): the route answers 202 with the job.
ASYNC = {"Prefer": "respond-async"}
