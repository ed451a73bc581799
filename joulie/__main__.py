from joulie.cli import entrypoint

entrypoint()
