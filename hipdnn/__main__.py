from hipdnn.cli import run

run()
