"""The workflow as written: the pydantic model (model.py), reading YAML or XML files into it
(load.py, xml_reader.py), the JSON Schemas (schema.py), ``inputs:`` (inputs.py),
``requestedStart`` (starttime.py) and the one template renderer (templates.py)."""
