"""NumPy references and input makers, one module per assignment.

These modules import nothing but NumPy, so each assignment's public self-check bundles its module
verbatim: students check against the same references the hidden grader uses.
"""
