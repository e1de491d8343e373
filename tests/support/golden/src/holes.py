import os


def list_python_files(folder):
    names = []
    for name in os.listdir(folder):
        if name.endswith(".py"):
            names.append(
    return names


def read_lines(path):
    with open(path) as handle:
        return 


def mean(values):
    if not values:
        return 0
    return sum(values) / 
