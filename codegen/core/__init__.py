"""The foundation every layer imports: errors, hardware facts, atomic files, progress events, report columns,
toolchain discovery, the YAML source reader and the worker pools. Imports nothing else of codegen."""
