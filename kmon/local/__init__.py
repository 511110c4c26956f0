"""kmon/local"""
