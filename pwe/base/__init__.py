"""What every layer may use (hostinfo and protocols included): the one error tree
(errors.py), the line-numbered YAML reader (yaml_reader.py) and the source positions and
suggestions of its messages (source.py), where pwe's state and configuration live
(places.py), and opening and writing the files of a run directory (regular.py).
Standard library and PyYAML only; it imports nothing else of pwe."""
