"""Worker process and the embedded dev stack."""
