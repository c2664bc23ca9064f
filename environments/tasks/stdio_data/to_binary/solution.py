n = int(input())
digits = ""
while n:
    digits = str(n % 2) + digits
    n //= 2
print(digits or "0")
