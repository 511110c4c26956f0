"""kmon/history"""
