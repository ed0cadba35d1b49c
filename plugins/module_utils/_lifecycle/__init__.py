"""The server module's lifecycle of the servers of one host: request, plan, steps, sequence, result, job."""
