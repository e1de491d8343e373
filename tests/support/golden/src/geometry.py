"""Shapes and their measurements."""

import math


class Circle:
    def __init__(self, radius):
        self.radius = radius

    def area(self):
        return math.pi * self.radius ** 2

    def circumference(self):
        pass


def rectangle_area(width, height):
    return width * height


def distance(p, q):
    dx = q[0] - p[0]
    dy = q[1] - p[1]
    return math.sqrt(dx * dx + dy * dy)


def total_area(shapes):
    total = 0
    for shape in shapes:
        total += shape.area()
    return total


def parse_point(text):
    x, y = text.split(",")
    return float(x), float(y
