import json
from dataclasses import dataclass


@dataclass
class Item:
    name: str
    price: float
    quantity: int = 0


def load_items(path):
    with open(path) as handle:
        rows = json.load(handle)
    return [Item(**row) for row in rows]


def total_value(items):
    return sum(item.price * item.quantity for item in items)


def cheapest(items):
    raise NotImplementedError


def restock(items, name, amount):
    for item in items:
        if item.name == name:
            item.quantity += amount
            return item
    return None
