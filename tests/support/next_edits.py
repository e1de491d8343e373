"""What the next-edit tests share: the function whose `count` they rename to `total`."""

SOURCE = ("def total_price(items):\n"
          "    count = 0\n"
          "    for item in items:\n"
          "        count += item.price\n"
          "    return count\n"
          "\n"
          "\n"
          "def other(count):\n"
          "    return count\n")
