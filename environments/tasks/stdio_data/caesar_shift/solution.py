k = int(input())
line = input()
print("".join(c if c == " " else chr((ord(c) - ord("a") + k) % 26 + ord("a")) for c in line))
