"""The workflow as written: the pydantic model (model.py), its rules and methods in the
standard library (rules.py), the checker derived from it (records.py, check_table.py),
reading YAML or XML files into it (load.py, xml_reader.py), what is derived from the model
(schema.py: the JSON Schema, the checker's tables), ``inputs:`` (inputs.py),
``requestedStart`` (starttime.py) and the one template renderer (templates.py)."""
