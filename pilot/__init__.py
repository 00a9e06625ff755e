"""The glide-in pilot: runs inside an allocation and fans members out over its cores.

Standard library only, so that it can be staged to a cluster that has no pwe installed.
See pilot/DESIGN.md for its roles, messages and failure model.
"""
