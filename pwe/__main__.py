from .cli.front import console

console()
